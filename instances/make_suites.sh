#!/usr/bin/env bash
# Regenerates the standard pool and suites under instances/ byte for byte (tests/test_suites_committed.py checks it).
set -euo pipefail
cd "$(dirname "$0")/.."
SHARDOPT=${SHARDOPT:-.venv/bin/shardopt}
$SHARDOPT make-pool --out instances/pools/dlrm-synthetic-856.json --tables 856 --seed 0 --split-seed 0
for pool in train test; do
  seed=$([ "$pool" = train ] && echo 0 || echo 1)
  $SHARDOPT generate --family dreamshard --count 20 --seed "$seed" --pool "$pool" --out "instances/suites/dreamshard-$pool"
  $SHARDOPT generate --family neuroshard --count 20 --seed "$seed" --pool "$pool" --out "instances/suites/neuroshard-$pool"
  $SHARDOPT generate --family autoshard --count 10 --seed "$seed" --pool "$pool" --out "instances/suites/autoshard-$pool"
done
$SHARDOPT generate --family production --count 2 --seed 0 --pool all --out instances/suites/production
# the CPU-scale family: judged on this machine's CPU at its own workload (docs/measured.md)
$SHARDOPT generate --family cpu --count 40 --seed 0 --pool train --out instances/suites/cpu-train
$SHARDOPT generate --family cpu --count 12 --seed 1 --pool test --out instances/suites/cpu-test
# beyond table-wise HBM (issue 17): tables 2-20x a device's HBM, and models 1.5-4x the cluster's HBM with host memory
$SHARDOPT generate --family huge --count 40 --seed 0 --pool train --out instances/suites/huge-train
$SHARDOPT generate --family huge --count 12 --seed 1 --pool test --out instances/suites/huge-test
$SHARDOPT generate --family tiered --count 40 --seed 0 --pool train --out instances/suites/tiered-train
$SHARDOPT generate --family tiered --count 12 --seed 1 --pool test --out instances/suites/tiered-test
# clusters as they are built now (issue 36): GB200 NVL72 racks, an NVLink domain of 72 over hosts of 4 (topology levels)
$SHARDOPT generate --family nvl72 --count 6 --seed 0 --pool train --out instances/suites/nvl72-train
$SHARDOPT generate --family nvl72 --count 4 --seed 1 --pool test --out instances/suites/nvl72-test
$SHARDOPT generate --family mixed --count 6 --seed 0 --pool train --out instances/suites/mixed-train
$SHARDOPT generate --family mixed --count 4 --seed 1 --pool test --out instances/suites/mixed-test
# real models' shape (issue 56): a few huge, heavily pooled tables among many small ones, on 8 to 512 devices
$SHARDOPT generate --family skewed --count 14 --seed 0 --pool train --out instances/suites/skewed-train
$SHARDOPT generate --family skewed --count 7 --seed 1 --pool test --out instances/suites/skewed-test
# 2D sparse parallelism (issue 58): 1,024 and 4,096 H100s, the pool's tables or MLPerf DLRMv2's, group size auto
$SHARDOPT generate --family two-d --count 4 --seed 0 --pool train --out instances/suites/two-d-train
$SHARDOPT generate --family two-d --count 4 --seed 1 --pool test --out instances/suites/two-d-test
# published models' table configurations (instances/real/configs) on named clusters
"$(dirname "$SHARDOPT")/python" instances/real/make_real.py
