#!/usr/bin/env python3
"""scripts/gpu_probe.sh, the question scripts/gpu_check.sh asks before spending a lent GPU's
minutes: do this build's GPU tests run here, or skip? Against stand-ins for cuda_ops_test that
print gtest's summaries (a device: the test passed; none: it skipped; a failure; a missing
binary), and, given the real binary on a machine without a GPU, against that one.

    python3 tests/kernels/gpu_probe_test.py [REAL_CUDA_OPS_TEST]
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PROBE = os.path.join(ROOT, "scripts", "gpu_probe.sh")
REAL = sys.argv.pop(1) if len(sys.argv) > 1 else None

SUMMARY = """[==========] {ran} test{s} from 1 test suite ran. (0 ms total)
[  PASSED  ] {passed} test{ps}.
"""
SKIPPED = """[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] CudaDevice.CountAndDescriptionAgree
"""
FAILED = """[  FAILED  ] 1 test, listed below:
[  FAILED  ] CudaDevice.CountAndDescriptionAgree
"""


def summary(ran, passed):
    return SUMMARY.format(ran=ran, s="" if ran == 1 else "s", passed=passed, ps="" if passed == 1 else "s")


# What each stand-in prints and exits with when asked for the one test the probe runs. Asked for
# anything else (say CudaDevice.*, a suite that also holds a test needing no device), each prints
# the suite's two passes: a probe that asked so would read a device as none.
CASES = {
    "device": (summary(1, 1), 0),
    "no_device": ("no CUDA device here (cudaErrorNoDevice)\n" + summary(1, 0) + SKIPPED, 0),
    "failed": (summary(1, 0) + FAILED, 1),
}


def stand_in(directory, text, rc):
    path = os.path.join(directory, "bin", "cuda_ops_test")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/usr/bin/env bash\n")
        f.write('if [[ "$*" != "--gtest_filter=CudaDevice.CountAndDescriptionAgree" ]]; then\n')
        f.write("  cat <<'X'\n" + summary(2, 2) + "X\n  exit 0\nfi\n")
        f.write("cat <<'X'\n" + text + "X\n")
        f.write(f"exit {rc}\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def probe(build):
    return subprocess.run(["bash", PROBE, build], capture_output=True, text=True)


class GpuProbe(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_a_device_is_exit_0_and_silent(self):
        stand_in(self.dir, *CASES["device"])
        r = probe(self.dir)
        self.assertEqual((r.returncode, r.stdout), (0, ""), r.stderr)

    def test_a_skipped_test_is_no_device_with_its_reason(self):
        stand_in(self.dir, *CASES["no_device"])
        r = probe(self.dir)
        self.assertEqual(r.returncode, 3)
        self.assertIn("no CUDA device here (cudaErrorNoDevice)", r.stdout)

    def test_a_failed_test_is_no_device(self):
        stand_in(self.dir, *CASES["failed"])
        self.assertEqual(probe(self.dir).returncode, 3)

    def test_a_missing_binary_is_no_device(self):
        self.assertEqual(probe(self.dir).returncode, 3)

    @unittest.skipUnless(REAL, "no real cuda_ops_test given")
    def test_the_real_binary_without_a_gpu(self):
        if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0:
            self.skipTest("this machine has a GPU: the probe may rightly find it")
        os.makedirs(os.path.join(self.dir, "bin"))
        os.symlink(os.path.abspath(REAL), os.path.join(self.dir, "bin", "cuda_ops_test"))
        r = probe(self.dir)
        self.assertEqual(r.returncode, 3, r.stdout)
        self.assertIn("SKIPPED", r.stdout)


if __name__ == "__main__":
    unittest.main()
