#!/usr/bin/env python3
"""bench/kernel_profile.py against sums done by hand, on a report in the layout of
`ncu -i REPORT --csv --page raw`: a header row, a units row, one row per launch (durations in
nanoseconds, thousands separated by commas, the kernel's arguments after its name)."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "kernel_profile.py")

REPORT = """\
"ID","Process ID","Kernel Name","gpu__time_duration.sum"
"","","","nsecond"
"0","7","gemv_linear_kernel<1, 8>(float *, const unsigned short *)","13,500"
"1","7","attention_decode_tiles<128>(float *)","6,000"
"2","7","gemv_linear_kernel<1, 8>(float *, const unsigned short *)","2,500"
"3","7","gemv_linear_kernel<1, 8>(float *, const unsigned short *)","14,000"
"4","7","attention_decode_tiles<128>(float *)","4,000"
"""


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


class KernelProfile(unittest.TestCase):
    def setUp(self):
        fd, self.path = tempfile.mkstemp(suffix=".csv")
        with os.fdopen(fd, "w") as f:
            f.write(REPORT)

    def tearDown(self):
        os.remove(self.path)

    def test_sums_by_kernel_with_per_step_times(self):
        r = run(self.path, "--steps", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        # 5 launches, 13.5 + 6 + 2.5 + 14 + 4 = 40 us; per step of 2: 2.5 launches, 20 us.
        self.assertEqual(lines[0], "5 launches, 40.0 us of kernel time (8.00 us per launch)")
        self.assertEqual(lines[1], "per step of 2: 2.5 launches, 20.0 us")
        gemv_at = next(i for i, l in enumerate(lines) if l.endswith("gemv_linear_kernel<1, 8>"))
        attention_at = next(i for i, l in enumerate(lines) if l.endswith("attention_decode_tiles<128>"))
        self.assertLess(gemv_at, attention_at)  # by total time, largest first
        gemv = lines[gemv_at].split()
        # 30 us, 75%, 3 launches, 10 us a launch, 15 us a step.
        self.assertEqual(gemv[:5], ["30.0", "75.0%", "3", "10.00", "15.00"])
        attention = lines[attention_at].split()
        self.assertEqual(attention[:5], ["10.0", "25.0%", "2", "5.00", "5.00"])

    def test_without_steps_no_per_step_column(self):
        r = run(self.path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("per step", r.stdout)
        self.assertNotIn("us/step", r.stdout)

    def test_a_report_without_the_metric_is_one_error(self):
        with open(self.path, "w") as f:
            f.write('"ID","Kernel Name"\n"0","k"\n')
        r = run(self.path)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no header with 'Kernel Name' and gpu__time_duration.sum", r.stderr)


if __name__ == "__main__":
    unittest.main()
