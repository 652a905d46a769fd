"""A stand-in service for tests of actorq.launch.zygote: prints what it was given (and
whether it started with numba's compiled actor kernels, which the zygote preloads), then
burns ACTORQ_TEST_BURN CPU seconds, then exits with ACTORQ_TEST_EXIT_CODE or sleeps until
signalled (ACTORQ_TEST_SLEEP=1)."""

import os
import sys
import time

print(f"child pid {os.getpid()} argv0 {sys.argv[0]} value {os.environ.get('ACTORQ_TEST_VALUE')}")
fused = sys.modules.get("actorq.quant.fused_mlp")
print(f"forward kernel loaded {bool(fused and fused.mlp_forward.signatures)}")
sys.stdout.flush()
burn_until = time.process_time() + float(os.environ.get("ACTORQ_TEST_BURN", "0"))
while time.process_time() < burn_until:
    pass
if os.environ.get("ACTORQ_TEST_SLEEP") == "1":
    time.sleep(60)
sys.exit(int(os.environ.get("ACTORQ_TEST_EXIT_CODE", "0")))
