#!/usr/bin/env bash
# device-check.sh compares what gpulab-agent reads over NVML with what
# nvidia-smi reports, on a real GPU machine with no Kubernetes. It builds
# nothing: copy a gpulab-agent built elsewhere (make build) to the machine.
#
#   node-agent/hack/device-check.sh [path/to/gpulab-agent]
#
# It prints both views, then compares index, UUID, product name, memory
# (MiB), PCI bus id and compute capability per GPU, and checks that the
# ResourceSlice DRA would be offered (inventory -o resourceslice) holds
# one device per healthy GPU, by UUID. Exit codes: 0 agree, 1 disagree,
# 2 a tool is missing or failed.
set -euo pipefail

agent=${1:-${GPULAB_AGENT:-./gpulab-agent}}
fail() { echo "device-check: $*" >&2; exit 2; }

[[ -x "$agent" ]] || fail "no gpulab-agent binary at $agent (pass its path as the first argument)"
command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: is the NVIDIA driver installed?"
command -v python3 >/dev/null || command -v jq >/dev/null || fail "need python3 or jq to read the agent's JSON"

fields=index,uuid,name,memory.total,pci.bus_id,compute_cap
agent_json=$("$agent" inventory -o json --node-name="$(hostname)") || fail "gpulab-agent inventory failed (exit $?)"
smi_csv=$(nvidia-smi --query-gpu="$fields" --format=csv) || fail "nvidia-smi failed (exit $?)"

echo "== gpulab-agent inventory -o json"
echo "$agent_json"
echo
echo "== nvidia-smi --query-gpu=$fields --format=csv"
echo "$smi_csv"
echo

# One line per GPU: index|uuid|name|memory MiB|bus id (upper case)|compute cap.
agent_rows() {
  if command -v python3 >/dev/null; then
    python3 -c '
import json, sys
inv = json.load(sys.stdin)
for g in inv.get("status", {}).get("gpus", []):
    print("|".join([str(g.get("index", "")), g.get("uuid", ""), g.get("product", ""),
                    str(g.get("memoryMiB", "")), g.get("pciBusID", "").upper(), g.get("computeCapability", "")]))
' <<<"$agent_json"
  else
    jq -r '.status.gpus // [] | .[] | [(.index|tostring), .uuid, .product, (.memoryMiB|tostring),
      (.pciBusID|ascii_upcase), .computeCapability] | join("|")' <<<"$agent_json"
  fi
}

smi_rows() {
  tail -n +2 <<<"$smi_csv" | awk -F', ' '{
    mem = $4; sub(/ MiB$/, "", mem)
    print $1 "|" $2 "|" $3 "|" mem "|" toupper($5) "|" $6
  }'
}

slice=$("$agent" inventory -o resourceslice --node-name="$(hostname)") || fail "gpulab-agent inventory -o resourceslice failed (exit $?)"
echo "== gpulab-agent inventory -o resourceslice"
echo "$slice"
echo

rc=0
if diff -u --label nvidia-smi --label gpulab-agent <(smi_rows) <(agent_rows); then
  echo "device-check: gpulab-agent and nvidia-smi agree on $(smi_rows | wc -l) GPU(s)"
else
  echo "device-check: gpulab-agent and nvidia-smi DISAGREE (diff above: - nvidia-smi, + gpulab-agent)" >&2
  rc=1
fi
# Each GPU's UUID appears once among the slice's device attributes.
for uuid in $(smi_rows | cut -d'|' -f2); do
  n=$(grep -c "string: $uuid\$" <<<"$slice" || true)
  if [[ "$n" != 1 ]]; then
    echo "device-check: GPU $uuid appears $n times in the ResourceSlice (want 1; an unhealthy GPU is left out)" >&2
    rc=1
  fi
done
((rc == 0)) && echo "device-check: the ResourceSlice offers each GPU once"
exit "$rc"
