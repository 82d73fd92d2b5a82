#!/usr/bin/env bash
# Writes the seed corpus, fuzz/corpus/<target>/seed-*: a few small meaningful inputs per
# target, each from a text proto (or plain bytes) below, encoded with protoc. Re-run after
# changing a seed or a message; inputs a fuzzer found and `scripts/fuzz --merge` added
# (named by their SHA-1) are left alone.
#   fuzz/make_corpus.sh
set -euo pipefail
cd "$(dirname "$0")"
corpus=corpus

# seed TARGET NAME MESSAGE: the text proto on stdin, encoded as MESSAGE.
seed() {
  mkdir -p "$corpus/$1"
  protoc -I ../proto -I . --encode="$3" fuzz_input.proto > "$corpus/$1/seed-$2"
}
# raw TARGET NAME: the bytes of stdin as they are.
raw() {
  mkdir -p "$corpus/$1"
  cat > "$corpus/$1/seed-$2"
}
# argv TARGET NAME ARG...: the arguments, NUL-separated (as argv holds them).
argv() {
  local target=$1 name=$2
  shift 2
  mkdir -p "$corpus/$target"
  printf '%s\0' "$@" | head -c -1 > "$corpus/$target/seed-$name"
}
rm -f "$corpus"/*/seed-*

# --- plan_fuzz: ballast.v1.WorkloadPlan against the model in plan_fuzz.cc (group vit/tp0,
# 4 ranks; block 0: 16 units even, block 1: 8 units 5/1/1/1, block 7: 3 units owned by 1, 2).
P=ballast.v1.WorkloadPlan
seed plan_fuzz all-local $P <<<'group: "vit/tp0" version: 1 imputation: IMPUTATION_ZERO'
seed plan_fuzz prune $P <<<'group: "vit/tp0" version: 2 imputation: IMPUTATION_MEAN
  blocks { block: 0 pruned_units: [0, 2, 0, 4] }'
seed plan_fuzz offload $P <<<'group: "vit/tp0" version: 3 imputation: IMPUTATION_ZERO
  blocks { block: 1 offloads { owner: 0 helper: 3 units: 2 } offloads { owner: 0 helper: 2 units: 1 } }'
seed plan_fuzz reshard $P <<<'group: "vit/tp0" version: 4 imputation: IMPUTATION_ZERO
  blocks { block: 7 owner_of_unit: [0, 1, 3] pruned_units: [1, 0, 0, 0] }'
seed plan_fuzz mixed $P <<<'group: "vit/tp0" version: 1700000000000000 imputation: IMPUTATION_MEAN
  blocks { block: 0 pruned_units: [1, 1, 1, 1] offloads { owner: 3 helper: 0 units: 3 } }
  blocks { block: 1 owner_of_unit: [0, 0, 0, 1, 1, 2, 2, 3] offloads { owner: 1 helper: 3 units: 2 } }'
seed plan_fuzz too-many $P <<<'group: "vit/tp0" version: 5 imputation: IMPUTATION_ZERO
  blocks { block: 1 pruned_units: [5, 0, 0, 0] offloads { owner: 0 helper: 1 units: 1 } }'
seed plan_fuzz bad-fields $P <<<'group: "vit/tp0" version: 6 imputation: IMPUTATION_ZERO
  blocks { block: 0 offloads { owner: 2 helper: 2 units: 1 } }
  blocks { block: 0 }'
seed plan_fuzz bad-imputation $P <<<'group: "vit/tp0" version: 7 imputation: 9'
seed plan_fuzz priority $P <<<'group: "vit/tp0" version: 8 imputation: IMPUTATION_MEAN
  priority: PRIORITY_ROUND_ROBIN blocks { block: 0 pruned_units: [0, 2, 0, 4] }'
seed plan_fuzz bad-priority $P <<<'group: "vit/tp0" version: 9 imputation: IMPUTATION_ZERO priority: 9'

# --- worker_message_fuzz: ballast.fuzz.WorkerSession (worker streams into one agent).
W=ballast.fuzz.WorkerSession
worker() {  # worker RANK: a hello for rank RANK of vit/tp0 (2 ranks, block 0: 4 units)
  echo "hello { job: \"vit\" group: \"tp0\" rank: $1 group_size: 2 device: \"node-1/gpu$1\"
    node: \"node-1\" blocks { block: 0 num_units: 4 owner_of_unit: [0, 0, 1, 1] unit_bytes: 4096 } }"
}
report() {  # report STEP SECONDS
  echo "report { step: $1 plan_version: 0 agreement_seconds: 0.001
    blocks { block: 0 compute_seconds: $2 comm_seconds: 0.002 units_computed: 2 } }"
}
seed worker_message_fuzz attach-report $W <<EOF2
steps { worker: 0 message { $(worker 0) } }
steps { worker: 1 message { $(worker 1) } }
steps { worker: 0 message { $(report 1 0.004) } }
steps { worker: 1 message { $(report 1 0.008) } take_reports: 10 }
EOF2
seed worker_message_fuzz plan-relay $W <<EOF2
steps { worker: 0 message { $(worker 0) } }
steps { worker: 2 plan { job: "vit" plan { group: "tp0" version: 5 imputation: IMPUTATION_ZERO
  blocks { block: 0 offloads { owner: 1 helper: 0 units: 1 } } } } }
steps { worker: 1 message { $(worker 1) } }
steps { worker: 1 message { $(report 2 0.008) } detach: true take_reports: 4 }
EOF2
seed worker_message_fuzz reshard-report $W <<EOF2
steps { worker: 0 message { $(worker 0) } }
steps { worker: 0 message { report { step: 3 plan_version: 9 blocks { block: 0
  compute_seconds: 0.003 units_computed: 3 owner_of_unit: [0, 0, 0, 1] } } } take_reports: 1 }
EOF2
seed worker_message_fuzz bad-report $W <<EOF2
steps { worker: 3 message { $(report 1 0.1) } }
steps { worker: 3 message { $(worker 1) } }
steps { worker: 3 message { report { step: -1 blocks { block: 0 compute_seconds: -1 } } } }
steps { worker: 3 message { $(worker 1) } detach: true }
steps { worker: 0 message { $(worker 1) } take_reports: 2 }
EOF2
{
  echo "steps { worker: 0 message { $(worker 0) } }"
  for step in 1 2 3 4 5 6 7 8 9 10 11; do echo "steps { worker: 0 message { $(report $step 0.004) } }"; done
  echo "steps { worker: 0 take_reports: 3 } steps { worker: 0 take_reports: 63 }"
} | seed worker_message_fuzz queue-overflow $W

# --- agent_message_fuzz: ballast.fuzz.AgentSession (agents' sessions with a coordinator).
A=ballast.fuzz.AgentSession
identity() {  # identity RANK [JOB]: rank RANK of JOB/tp0 (2 ranks, block 0: 8 units)
  echo "job: \"${2:-vit}\" group: \"tp0\" rank: $1 group_size: 2 device: \"node-1/gpu$1\" node: \"node-1\"
    blocks { block: 0 num_units: 8 owner_of_unit: [0, 0, 0, 0, 1, 1, 1, 1] unit_bytes: 4096 }"
}
batch() {  # batch STEP: both ranks' reports, rank 1 twice as slow
  echo "reports { reports { job: \"vit\" group: \"tp0\" rank: 0 step { step: $1
      blocks { block: 0 compute_seconds: 0.004 units_computed: 4 } } }
    reports { job: \"vit\" group: \"tp0\" rank: 1 step { step: $1
      blocks { block: 0 compute_seconds: 0.008 units_computed: 4 } } } }"
}
policy() {  # policy MODE
  echo "policy { mode: \"$1\" max_pruned_fraction_rank: 0.5 max_pruned_fraction_group: 0.25
    imputation: \"mean\" priority: \"change\" accuracy_weight_seconds: 0.0001 straggler_threshold: 0.1
    hysteresis: 0.05 reshard_after_ms: 2000 report_period_ms: 100 }"
}
for mode in migrate resize auto; do
  {
    policy $mode
    echo "steps { message { hello { agent_id: \"agent-1\" node: \"node-1\"
      workers { $(identity 0) } workers { $(identity 1) } } } }"
    for step in 1 2 3 4 5 6 7 8 9 10 11 12; do
      echo "steps { message { $(batch $step) } advance_ms: 300 }"
    done
  } | seed agent_message_fuzz straggler-$mode $A
done
seed agent_message_fuzz join-leave $A <<EOF2
steps { agent: 1 message { hello { agent_id: "agent-2" } } }
steps { agent: 1 message { worker_joined { $(identity 0) } } }
steps { agent: 1 message { worker_joined { $(identity 1) } } advance_ms: 100 }
steps { agent: 1 message { worker_left { $(identity 1) } } }
steps { agent: 1 message { reports { dropped: 3 } } advance_ms: 1000 }
EOF2
seed agent_message_fuzz reconnect-forget $A <<EOF2
steps { agent: 0 message { hello { agent_id: "agent-1" workers { $(identity 0) } } } }
steps { agent: 0 message { $(batch 1) } disconnect: true advance_ms: 60000 }
steps { agent: 2 message { hello { agent_id: "agent-1" workers { $(identity 1) } } } }
steps { agent: 2 disconnect: true advance_ms: 60000 }
steps { agent: 0 message { hello { agent_id: "agent-1" } } advance_ms: 60000 }
EOF2
seed agent_message_fuzz refused $A <<EOF2
steps { agent: 0 message { $(batch 1) } }
steps { agent: 0 message { hello { agent_id: "bad id" } } }
steps { agent: 0 message { hello { agent_id: "agent-1" workers { $(identity 0) } workers { $(identity 0 a) }
  workers { $(identity 0 b) } workers { $(identity 0 c) } } } }
steps { agent: 0 message { hello { agent_id: "agent-1" workers { $(identity 0) } } } }
steps { agent: 0 message { hello { agent_id: "agent-1" } } }
steps { agent: 0 message { } }
steps { agent: 0 message { reports { reports { job: "vit" group: "tp9" rank: 0 step { step: 1 } } } } }
EOF2

# --- admin_request_fuzz: ballast.fuzz.AdminSession (calls on a coordinator running job
# vit, group tp0; token "fuzz-token", allowed CN "ops").
C=ballast.fuzz.AdminSession
T='authorization: "Bearer fuzz-token"'
seed admin_request_fuzz read $C <<EOF2
calls { get_status { } $T }
calls { get_status { job: "vit" } $T }
calls { get_policy { job: "vit" } $T }
calls { explain { job: "vit" group: "tp0" } $T }
EOF2
seed admin_request_fuzz write $C <<EOF2
calls { set_policy { job: "vit" policy { mode: "resize" max_pruned_fraction_rank: 0.5
  max_pruned_fraction_group: 0.25 imputation: "zero" priority: "magnitude"
  accuracy_weight_seconds: 1 straggler_threshold: 0.1 hysteresis: 0.05
  reshard_after_ms: 60000 report_period_ms: 100 } } $T advance_ms: 200 }
calls { set_paused { job: "vit" paused: true } $T advance_ms: 200 }
calls { set_paused { paused: false } $T }
calls { set_cordon { device: "node-1/gpu1" cordoned: true reason: "ECC errors" } $T advance_ms: 200 }
calls { set_cordon { device: "node-1/gpu1" cordoned: false } $T }
calls { set_cordon { device: "node-1/gpu1" cordoned: false } $T }
EOF2
seed admin_request_fuzz credentials $C <<EOF2
calls { get_status { } }
calls { get_status { } authorization: "Basic Zm9vOmJhcg==" }
calls { get_status { } authorization: "Bearer wrong" }
calls { get_status { } authorization: "bearer   fuzz-token  " }
calls { get_status { } verified_cns: "ops" }
calls { get_status { } verified_cns: "dev" }
EOF2
seed admin_request_fuzz preconfigure $C <<EOF2
calls { set_policy { job: "next" policy { mode: "observe" imputation: "mean" priority: "change"
  report_period_ms: 1000 } } $T }
calls { set_policy { job: "next" preconfigure: true policy { mode: "observe" imputation: "mean"
  priority: "change" report_period_ms: 1000 } } $T }
calls { set_paused { job: "later" paused: true preconfigure: true } $T }
calls { get_policy { job: "next" } $T }
calls { explain { job: "next" group: "tp0" } $T }
EOF2

# --- policy_fuzz: byte 0 even: ballastctl's `policy set` arguments as text; odd: a
# serialized ballast.v1.Policy.
printf '\0vit mode=migrate hysteresis=0.1' | raw policy_fuzz set-migrate
printf '\0next mode=resize max_pruned_fraction_rank=0.3 max_pruned_fraction_group=0.2 reshard_after_ms=5000 report_period_ms=200' \
  | raw policy_fuzz set-resize
printf '\0vit priority=round-robin imputation=zero accuracy_weight_seconds=2.5 straggler_threshold=0.2' \
  | raw policy_fuzz set-priority
printf '\0vit mode=off mode=auto' | raw policy_fuzz set-twice
printf '\0vit report_period_ms=5 hysteresis=nan' | raw policy_fuzz set-bad
{
  printf '\1'
  protoc -I ../proto --encode=ballast.v1.Policy ballast/v1/admin.proto <<<'mode: "auto"
    max_pruned_fraction_rank: 0.5 max_pruned_fraction_group: 0.25 imputation: "mean"
    priority: "change" accuracy_weight_seconds: 1 straggler_threshold: 0.1 hysteresis: 0.05
    reshard_after_ms: 60000 report_period_ms: 1000'
} | raw policy_fuzz proto-default

# --- flags_fuzz: command lines, NUL-separated: flags, then a ballastctl command.
argv flags_fuzz status-json --json status
argv flags_fuzz policy-set --preconfigure --timeout=2s policy set vit mode=migrate
argv flags_fuzz policy-get policy get vit
argv flags_fuzz insecure --listen=0.0.0.0:7070 --allow_insecure_admin --allow_insecure_agents \
  explain vit tp0
argv flags_fuzz coordinator-numbers --link_bytes_per_second=1e9 --plan_dwell=2s \
  --dwell_hysteresis=0.3 --marginal_straggler_for=3s --forget_after=10m --max_workers_per_agent=1024 \
  --max_groups_per_agent=256 --max_jobs_per_agent=64 cordon node-1/gpu0 ECC errors
argv flags_fuzz mtls '--listen=[::1]:7070' '--admin_allowed_cns=ops, sre' --tls_client_ca=ca.pem \
  --tls_cert=server.pem --admin_token_file=token pause vit
argv flags_fuzz unix --listen=unix:/run/ballast/coordinator.sock --nojson resume
argv flags_fuzz refused --listen=10.0.0.1:7070 --max_jobs_per_agent=0 --timeout=-1s uncordon x
argv flags_fuzz usage -- --json policy set
