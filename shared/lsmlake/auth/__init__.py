"""Who may call what: TLS for the gRPC services, bearer tokens with roles, checked on every method.

`roles` maps every RPC of every service to the least role allowed, `tokens` reads the token file,
`interceptor` checks each call, `tls` builds server and channel credentials, `settings` reads it all
from flags and environment. Everything is off by default: a service without a token file accepts
every call, a service without a certificate listens in plaintext.
"""

from .roles import METHOD_ROLES, OPEN_SERVICES, Role, required_role
from .settings import ChannelSecurity, ServerSecurity
from .tokens import Principal, TokenStore

__all__ = ["METHOD_ROLES", "OPEN_SERVICES", "ChannelSecurity", "Principal", "Role", "ServerSecurity",
           "TokenStore", "required_role"]
