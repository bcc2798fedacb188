#!/usr/bin/env python3
"""bench/kernel_profile.py against sums done by hand, on a report in the layout of
`ncu -i REPORT --csv --page raw`: a header row, a units row, one row per launch (durations in
nanoseconds, thousands separated by commas, the kernel's arguments after its name), with and
without DRAM byte columns in units of their own."""
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

# The same launches with DRAM bytes: reads in MB, writes in KB.
REPORT_WITH_BYTES = """\
"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum","dram__bytes_write.sum"
"","","nsecond","Mbyte","Kbyte"
"0","gemv_linear_kernel<1, 8>(float *)","13,500","40","10"
"1","attention_decode_tiles<128>(float *)","6,000","1","0"
"2","gemv_linear_kernel<1, 8>(float *)","2,500","5","0"
"3","gemv_linear_kernel<1, 8>(float *)","14,000","45","10"
"4","attention_decode_tiles<128>(float *)","4,000","1","0"
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

    def test_dram_bytes_rates_and_time_over_the_floor(self):
        with open(self.path, "w") as f:
            f.write(REPORT_WITH_BYTES)
        r = run(self.path, "--steps", "2", "--bandwidth", "5000")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        # Bytes: gemv 90 MB + 20 KB = 90.02 MB, attention 2 MB; 92.02 MB in 40 us is 2,300.5 GB/s.
        # At 5,000 GB/s they take 18.404 us: 9.202 a step, 40 - 18.404 = 21.596 over, 10.798 a step.
        self.assertEqual(lines[2], "DRAM: 46.01 MB per step, 2300.5 GB/s over the kernels' time; "
                                   "at 5000 GB/s 9.2 us, 10.8 us over")
        gemv = next(l for l in lines if l.endswith("gemv_linear_kernel<1, 8>")).split()
        # 45.01 MB a step; 90.02 MB in 30 us is 3,000.67 GB/s; floor 18.004 us, (30 - 18.004) / 2 over.
        self.assertEqual(gemv[5:8], ["45.010", "3000.7", "6.00"])
        attention = next(l for l in lines if l.endswith("attention_decode_tiles<128>")).split()
        # 1 MB a step; 2 MB in 10 us is 200 GB/s; floor 0.4 us, (10 - 0.4) / 2 over.
        self.assertEqual(attention[5:8], ["1.000", "200.0", "4.80"])

    def test_bytes_without_a_bandwidth_no_floor_column(self):
        with open(self.path, "w") as f:
            f.write(REPORT_WITH_BYTES)
        r = run(self.path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("DRAM: 92.02 MB, 2300.5 GB/s over the kernels' time\n", r.stdout)
        self.assertNotIn("over us", r.stdout)
        gemv = next(l for l in r.stdout.splitlines() if l.endswith("gemv_linear_kernel<1, 8>")).split()
        self.assertEqual(gemv[4:6], ["90.020", "3000.7"])

    def test_a_byte_column_in_an_unknown_unit_is_one_error(self):
        with open(self.path, "w") as f:
            f.write(REPORT_WITH_BYTES.replace('"Mbyte"', '"furlong"'))
        r = run(self.path)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("column dram__bytes_read.sum: unknown unit 'furlong'", r.stderr)

    def test_a_report_without_the_metric_is_one_error(self):
        with open(self.path, "w") as f:
            f.write('"ID","Kernel Name"\n"0","k"\n')
        r = run(self.path)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no header with 'Kernel Name' and gpu__time_duration.sum", r.stderr)


if __name__ == "__main__":
    unittest.main()
