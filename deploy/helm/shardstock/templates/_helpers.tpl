{{/* The release's base name: "shardstock" for release shardstock. */}}
{{- define "shardstock.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "shardstock.secretName" -}}
{{- .Values.secret.name | default (include "shardstock.fullname" .) -}}
{{- end -}}

{{- define "shardstock.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* shardstock.shardName: the StatefulSet (and headless Service) of shard
     index .i; its one pod is NAME-0. */}}
{{- define "shardstock.shardName" -}}
{{- printf "%s-shard-%d" (include "shardstock.fullname" .root) (int .i) -}}
{{- end -}}

{{/* shardstock.shards: SHARDSTOCK_SHARDS, each master by its pod's stable
     DNS name (POD.SERVICE.NAMESPACE.svc), in shard-index order. The
     password is $(REDIS_PASSWORD), which Kubernetes expands from the
     variable of that name defined before it (a secretKeyRef): the Secret's
     value never appears in the manifest. */}}
{{- define "shardstock.shards" -}}
{{- $root := . -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.shards.count) -}}
{{- $name := include "shardstock.shardName" (dict "root" $root "i" $i) -}}
{{- $urls = append $urls (printf "redis://shardstock:$(REDIS_PASSWORD)@%s-0.%s.%s.svc:6379/0" $name $name $root.Release.Namespace) -}}
{{- end -}}
{{- join "," $urls -}}
{{- end -}}

{{/* The restricted pod security profile's container settings. */}}
{{- define "shardstock.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* shardstock.secretEnv NAME KEY: an environment variable from the Secret. */}}
{{- define "shardstock.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "shardstock.secretName" .root }}
      key: {{ .key }}
{{- end -}}

{{/* shardstock.image (dict "root" . "what" "VALUE" "image" IMAGE): IMAGE,
     refused unless it is pinned by digest (NAME[:TAG]@sha256:...), which no
     registry can move under a running sale, or images.allowTags is set. */}}
{{- define "shardstock.image" -}}
{{- if not (or (regexMatch "@sha256:[0-9a-f]{64}$" .image) (eq (toString .root.Values.images.allowTags) "true")) -}}
{{- fail (printf "%s %q is pinned by a tag, which its registry can move to another image: give it by digest (%s@sha256:<64 hex digits>), or set images.allowTags=true for a trial" .what .image .image) -}}
{{- end -}}
{{- .image -}}
{{- end -}}

{{/* shardstock.dnsEgress: an egress rule to the cluster's DNS (port 53). */}}
{{- define "shardstock.dnsEgress" -}}
- to:
    {{- toYaml .Values.networkPolicy.dns | nindent 4 }}
  ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
{{- end -}}
