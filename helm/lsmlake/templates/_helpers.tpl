{{/* Names, labels and the pieces that all three components share. */}}

{{- define "lsmlake.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-lsmlake", or the release name alone when it already contains the chart name.
Kept to 40 characters so that "<fullname>-compactor-driver" fits a 63-character DNS label. */}}
{{- define "lsmlake.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "lsmlake.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "lsmlake.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of one component; call with (dict "root" $ "component" "catalog"). */}}
{{- define "lsmlake.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lsmlake.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of one component's objects; same argument as lsmlake.selectorLabels. */}}
{{- define "lsmlake.labels" -}}
helm.sh/chart: {{ include "lsmlake.chart" .root }}
{{ include "lsmlake.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: lsmlake
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end -}}

{{/* Name of one component's objects: "<fullname>-<component>". */}}
{{- define "lsmlake.componentName" -}}
{{- printf "%s-%s" (include "lsmlake.fullname" .root) .component -}}
{{- end -}}

{{- define "lsmlake.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "lsmlake.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lsmlake.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The compactors' own account: it may manage Spark executor pods (Role in compactor-rbac.yaml). */}}
{{- define "lsmlake.compactorServiceAccountName" -}}
{{- include "lsmlake.componentName" (dict "root" . "component" "compactor") -}}
{{- end -}}

{{/* host:port of the catalog Service, for the writers' and compactors' --catalog. */}}
{{- define "lsmlake.catalogAddress" -}}
{{- printf "%s:%d" (include "lsmlake.componentName" (dict "root" . "component" "catalog")) (int .Values.catalog.port) -}}
{{- end -}}

{{/* Secret holding the PostgreSQL metastore URL, and its key. */}}
{{- define "lsmlake.metastoreSecretName" -}}
{{- default (printf "%s-metastore" (include "lsmlake.fullname" .)) .Values.catalog.metastore.postgresql.existingSecret -}}
{{- end -}}

{{/* Secret holding the S3 access keys; empty when the pods get none from a Secret. */}}
{{- define "lsmlake.s3SecretName" -}}
{{- $c := .Values.warehouse.s3.credentials -}}
{{- if $c.existingSecret -}}
{{- $c.existingSecret -}}
{{- else if $c.accessKeyId -}}
{{- printf "%s-s3" (include "lsmlake.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Environment of every lsmlake container: logging, S3 settings and keys, extraEnv. */}}
{{- define "lsmlake.commonEnv" -}}
- name: LSMLAKE_LOG_FORMAT
  value: {{ .Values.logging.format | quote }}
- name: LSMLAKE_LOG_LEVEL
  value: {{ .Values.logging.level | quote }}
{{ include "lsmlake.storageEnv" . }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The object-store settings of `warehouse.s3` as the standard AWS variables (docs/storage.md): what lsmlake,
pyarrow and obstore read. Keys come only from a Secret; without one the AWS default credential chain applies. */}}
{{- define "lsmlake.storageEnv" -}}
{{- $s3 := .Values.warehouse.s3 -}}
{{- with $s3.region }}
- name: AWS_REGION
  value: {{ . | quote }}
- name: AWS_DEFAULT_REGION
  value: {{ . | quote }}
{{- end }}
{{- with $s3.endpoint }}
- name: AWS_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- $style := toString $s3.pathStyle }}
{{- if $style }}
- name: LSMLAKE_S3_PATH_STYLE
  value: {{ $style | quote }}
{{- end }}
{{- with include "lsmlake.s3SecretName" . }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $s3.credentials.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $s3.credentials.secretAccessKeyKey }}
{{- with $s3.credentials.sessionTokenKey }}
- name: AWS_SESSION_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "lsmlake.s3SecretName" $ }}
      key: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Pod annotations: Prometheus scraping of the component's metrics port, then the component's own.
Call with (dict "root" $ "port" N "extra" map). */}}
{{- define "lsmlake.podAnnotations" -}}
{{- if .root.Values.metrics.enabled }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Where the kubelet's gRPC probes go: the service's port, or with TLS on the plaintext health port
(kubelet probes cannot speak TLS). Call with (dict "root" $ "port" N). */}}
{{- define "lsmlake.probePort" -}}
{{- if .root.Values.security.tls.secretName -}}
{{- .root.Values.security.tls.healthPort -}}
{{- else -}}
{{- .port -}}
{{- end -}}
{{- end -}}

{{/* The gRPC probes of a container listening on port N; call with (dict "root" $ "port" N). */}}
{{- define "lsmlake.grpcProbes" -}}
{{- $p := .root.Values.probes -}}
{{- $port := include "lsmlake.probePort" . -}}
startupProbe:
  grpc:
    port: {{ $port }}
  periodSeconds: {{ $p.startup.periodSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
livenessProbe:
  grpc:
    port: {{ $port }}
  periodSeconds: {{ $p.liveness.periodSeconds }}
  timeoutSeconds: {{ $p.liveness.timeoutSeconds }}
  failureThreshold: {{ $p.liveness.failureThreshold }}
readinessProbe:
  grpc:
    port: {{ $port }}
  periodSeconds: {{ $p.readiness.periodSeconds }}
  timeoutSeconds: {{ $p.readiness.timeoutSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
{{- end -}}

{{/* Container ports: grpc and, with metrics on, metrics; call with (dict "root" $ "port" N "metricsPort" M). */}}
{{- define "lsmlake.containerPorts" -}}
- name: grpc
  containerPort: {{ .port }}
  protocol: TCP
{{- if .root.Values.security.tls.secretName }}
- name: health
  containerPort: {{ .root.Values.security.tls.healthPort }}
  protocol: TCP
{{- end }}
{{- if .root.Values.metrics.enabled }}
- name: metrics
  containerPort: {{ .metricsPort }}
  protocol: TCP
{{- end }}
{{- end -}}

{{/* Flags every service gets: listen address, gRPC port and metrics port. */}}
{{- define "lsmlake.listenArgs" -}}
- --host=0.0.0.0
- --port={{ .port }}
{{- if .root.Values.metrics.enabled }}
- --metrics-port={{ .metricsPort }}
{{- end }}
{{- end -}}

{{/* Volumes of every pod: /tmp, and the warehouse claim of a file:// warehouse. */}}
{{- define "lsmlake.commonVolumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- with .Values.warehouse.persistence.existingClaim }}
- name: warehouse
  persistentVolumeClaim:
    claimName: {{ . }}
{{- end }}
{{- end -}}

{{- define "lsmlake.commonVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.warehouse.persistence.existingClaim }}
- name: warehouse
  mountPath: {{ .Values.warehouse.persistence.mountPath }}
{{- end }}
{{- end -}}

{{/* Pod-level settings every component shares: account, pull secrets, security, scheduling.
Call with (dict "root" $ "values" .Values.<component> "serviceAccount" NAME "automount" BOOL). */}}
{{- define "lsmlake.podSpecCommon" -}}
serviceAccountName: {{ .serviceAccount }}
automountServiceAccountToken: {{ .automount }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
terminationGracePeriodSeconds: {{ .values.terminationGracePeriodSeconds }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Checks of values that would otherwise fail only at run time. */}}
{{- define "lsmlake.validate" -}}
{{- $m := .Values.catalog.metastore -}}
{{- if not (has $m.type (list "sqlite" "postgresql")) -}}
{{- fail "catalog.metastore.type must be sqlite or postgresql" -}}
{{- end -}}
{{- if and (eq $m.type "sqlite") (gt (int .Values.catalog.replicas) 1) -}}
{{- fail "catalog.replicas > 1 needs catalog.metastore.type=postgresql (SQLite serves one replica)" -}}
{{- end -}}
{{- if and (eq $m.type "postgresql") (not $m.postgresql.existingSecret) (not $m.postgresql.url) -}}
{{- fail "catalog.metastore.postgresql: set existingSecret or url" -}}
{{- end -}}
{{- $c := .Values.catalog -}}
{{- $others := list (int $c.port) -}}
{{- if .Values.metrics.enabled }}{{ $others = append $others (int $c.metricsPort) }}{{ end -}}
{{- if .Values.security.tls.secretName }}{{ $others = append $others (int .Values.security.tls.healthPort) }}{{ end -}}
{{- if $c.rest.enabled -}}
{{- if has (int $c.rest.port) $others -}}
{{- fail (printf "catalog.rest.port %d is already a port of the catalog (gRPC, metrics or health): choose another" (int $c.rest.port)) -}}
{{- end -}}
{{- $others = append $others (int $c.rest.port) -}}
{{- end -}}
{{- if and $c.ui.enabled (has (int $c.ui.port) $others) -}}
{{- fail (printf "catalog.ui.port %d is already a port of the catalog (gRPC, metrics, health or REST): choose another" (int $c.ui.port)) -}}
{{- end -}}
{{- if not .Values.warehouse.uri -}}
{{- fail "warehouse.uri is required" -}}
{{- end -}}
{{- if not (has (toString .Values.warehouse.s3.pathStyle) (list "" "true" "false")) -}}
{{- fail (printf "warehouse.s3.pathStyle = %v: use true, false or leave it empty" .Values.warehouse.s3.pathStyle) -}}
{{- end -}}
{{- $u := .Values.warehouse.uri -}}
{{- if and (contains "://" $u) (contains "@" (regexReplaceAll "[/?#].*$" (regexReplaceAll "^[a-z0-9+.-]+://" $u "") "")) -}}
{{- fail "warehouse.uri holds credentials (user info): they would be in every pod's arguments; put them in a Secret and name it in warehouse.s3.credentials.existingSecret" -}}
{{- end -}}
{{- $c3 := .Values.warehouse.s3.credentials -}}
{{- if and $c3.sessionTokenKey (not $c3.existingSecret) -}}
{{- fail "warehouse.s3.credentials.sessionTokenKey needs existingSecret (a session token expires: it is rotated in a Secret, not set as a value)" -}}
{{- end -}}
{{- if not .Values.kafka.bootstrap -}}
{{- fail "kafka.bootstrap is required (the compactors and --ingest need it)" -}}
{{- end -}}
{{- $sec := .Values.security -}}
{{- if and $sec.auth.tokensSecret (not $sec.auth.serviceTokensSecret) -}}
{{- fail "security.auth.tokensSecret needs security.auth.serviceTokensSecret (the writers' and compactors' own tokens for the catalog)" -}}
{{- end -}}
{{- if and $sec.tls.mutual (not $sec.tls.secretName) -}}
{{- fail "security.tls.mutual needs security.tls.secretName" -}}
{{- end -}}
{{- if not (has .Values.kafka.security.protocol (list "PLAINTEXT" "SSL" "SASL_PLAINTEXT" "SASL_SSL")) -}}
{{- fail "kafka.security.protocol must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL" -}}
{{- end -}}
{{- if not (has .Values.compactor.spark.mode (list "local" "kubernetes")) -}}
{{- fail "compactor.spark.mode must be local or kubernetes" -}}
{{- end -}}
{{- end -}}

{{/* imagePullSecrets as a comma-separated list of names, for spark.kubernetes.container.image.pullSecrets. */}}
{{- define "lsmlake.pullSecretNames" -}}
{{- $names := list -}}
{{- range .Values.imagePullSecrets -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- join "," $names -}}
{{- end -}}

{{/* gRPC TLS, token files and Kafka security of one service container: environment. Call with
(dict "root" $ "component" "catalog"|"writer"|"compactor"). */}}
{{- define "lsmlake.securityEnv" -}}
{{- $s := .root.Values.security -}}
{{- $k := .root.Values.kafka.security -}}
{{- if $s.tls.secretName }}
- name: LSMLAKE_TLS_CERT
  value: /etc/lsmlake/tls/tls.crt
- name: LSMLAKE_TLS_KEY
  value: /etc/lsmlake/tls/tls.key
- name: LSMLAKE_HEALTH_PORT
  value: {{ $s.tls.healthPort | quote }}
{{- if $s.tls.mutual }}
- name: LSMLAKE_TLS_CLIENT_CA
  value: /etc/lsmlake/tls/ca.crt
{{- end }}
{{- if ne .component "catalog" }}
- name: LSMLAKE_CATALOG_TLS_CA
  value: /etc/lsmlake/tls/ca.crt
{{- if $s.tls.mutual }}
- name: LSMLAKE_CATALOG_TLS_CERT
  value: /etc/lsmlake/tls/tls.crt
- name: LSMLAKE_CATALOG_TLS_KEY
  value: /etc/lsmlake/tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- if $s.auth.tokensSecret }}
- name: LSMLAKE_AUTH_TOKENS
  value: /etc/lsmlake/auth/{{ $s.auth.tokensKey }}
{{- if ne .component "catalog" }}
- name: LSMLAKE_CATALOG_TOKEN_FILE
  value: /etc/lsmlake/service-tokens/{{ .component }}
{{- end }}
{{- end }}
{{- if ne $k.protocol "PLAINTEXT" }}
- name: LSMLAKE_KAFKA_SECURITY_PROTOCOL
  value: {{ $k.protocol | quote }}
{{- end }}
{{- with $k.saslMechanism }}
- name: LSMLAKE_KAFKA_SASL_MECHANISM
  value: {{ . | quote }}
{{- end }}
{{- with $k.saslUsername }}
- name: LSMLAKE_KAFKA_SASL_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- with $k.saslPasswordSecret }}
- name: LSMLAKE_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $k.saslPasswordKey }}
{{- end }}
{{- if $k.caSecret }}
- name: LSMLAKE_KAFKA_SSL_CAFILE
  value: /etc/lsmlake/kafka-tls/ca.crt
{{- end }}
{{- end -}}

{{/* The Secrets of lsmlake.securityEnv as read-only volumes; same argument. */}}
{{- define "lsmlake.securityVolumes" -}}
{{- $s := .root.Values.security -}}
{{- with $s.tls.secretName }}
- name: tls
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- if $s.auth.tokensSecret }}
- name: auth-tokens
  secret:
    secretName: {{ $s.auth.tokensSecret }}
    defaultMode: 0440
{{- if ne .component "catalog" }}
- name: service-tokens
  secret:
    secretName: {{ $s.auth.serviceTokensSecret }}
    defaultMode: 0440
    items:
      - key: {{ .component }}
        path: {{ .component }}
{{- end }}
{{- end }}
{{- with .root.Values.kafka.security.caSecret }}
- name: kafka-tls
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{- define "lsmlake.securityVolumeMounts" -}}
{{- $s := .root.Values.security -}}
{{- if $s.tls.secretName }}
- name: tls
  mountPath: /etc/lsmlake/tls
  readOnly: true
{{- end }}
{{- if $s.auth.tokensSecret }}
- name: auth-tokens
  mountPath: /etc/lsmlake/auth
  readOnly: true
{{- if ne .component "catalog" }}
- name: service-tokens
  mountPath: /etc/lsmlake/service-tokens
  readOnly: true
{{- end }}
{{- end }}
{{- if .root.Values.kafka.security.caSecret }}
- name: kafka-tls
  mountPath: /etc/lsmlake/kafka-tls
  readOnly: true
{{- end }}
{{- end -}}
