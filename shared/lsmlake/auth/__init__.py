"""Who may call what: principals, their bearer tokens and roles, and the least role of every RPC.

`roles` maps every RPC of every service to the least role allowed, `tokens` reads the token file,
`principal` carries the caller's identity into the code serving a call. The gRPC side (the interceptor
that checks each call, TLS credentials, the flags and environment that configure it all) lives in
`lsmlake.rpc`. Everything is off by default: a service without a token file accepts every call.
"""
