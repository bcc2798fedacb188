#!/usr/bin/env python3
"""scripts/same_responses.py (one checkpoint's answers on two devices, side by side) against
`azr eval --out` lines written by hand.

    python3 tests/eval/same_responses_test.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "same_responses.py")


def row(item, response, correct, bench="cruxeval_o", sample=0):
    return json.dumps({"bench": bench, "correct": correct, "id": item, "response": response,
                       "sample": sample, "reason": "ok" if correct else "wrong"})


class SameResponses(unittest.TestCase):
    def run_script(self, a_lines, b_lines, *extra):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for name, lines in (("a.jsonl", a_lines), ("b.jsonl", b_lines)):
                paths.append(os.path.join(d, name))
                with open(paths[-1], "w") as f:
                    f.write("".join(line + "\n" for line in lines))
            p = subprocess.run([sys.executable, SCRIPT, *paths, *extra], capture_output=True, text=True)
        return p.returncode, p.stdout, p.stderr

    def test_counts_same_texts_and_agreeing_verdicts_whatever_the_order(self):
        a = [row("s0", "12", True), row("s1", "abc", False), row("s2", "[1, 2]", False)]
        b = [row("s2", "[1, 3]", True), row("s0", "12", True), row("s1", "abc", False)]
        rc, out, err = self.run_script(a, b)
        self.assertEqual(rc, 0, err)
        self.assertIn("2 of 3 responses the same text, 2 of 3 verdicts agree", out)
        # "[1, 2]" and "[1, 3]" part at character 4.
        self.assertIn('cruxeval_o s2 sample 0: differ from character 4: "2]" against "3]"', out)

    def test_a_response_that_is_a_prefix_of_the_other_differs_where_it_ends(self):
        rc, out, _ = self.run_script([row("s0", "abc", False)], [row("s0", "abcdef", False)])
        self.assertEqual(rc, 0)
        self.assertIn('differ from character 3: "" against "def"', out)

    def test_samples_and_benchmarks_are_told_apart(self):
        a = [row("s0", "x", True, sample=0), row("s0", "y", True, sample=1), row("s0", "x", True, bench="cruxeval_i")]
        b = [row("s0", "x", True, sample=0), row("s0", "x", True, sample=1), row("s0", "x", True, bench="cruxeval_i")]
        rc, out, _ = self.run_script(a, b)
        self.assertEqual(rc, 0)
        self.assertIn("2 of 3 responses the same text, 3 of 3 verdicts agree", out)
        self.assertIn("cruxeval_o s0 sample 1", out)

    def test_show_limits_the_differing_items_listed(self):
        a = [row(f"s{i}", "a", False) for i in range(5)]
        b = [row(f"s{i}", "b", False) for i in range(5)]
        rc, out, _ = self.run_script(a, b, "--show", "2")
        self.assertEqual(rc, 0)
        self.assertEqual(len(out.splitlines()), 3)

    def test_an_item_one_file_lacks_is_named(self):
        rc, _, err = self.run_script([row("s0", "a", False), row("s1", "a", False)], [row("s0", "a", False)])
        self.assertEqual(rc, 1)
        self.assertIn("b.jsonl has no response for cruxeval_o s1 sample 0", err)

    def test_a_line_that_is_not_a_result_is_named(self):
        rc, _, err = self.run_script([row("s0", "a", False), '{"bench": "cruxeval_o"}'], [row("s0", "a", False)])
        self.assertEqual(rc, 1)
        self.assertIn("a.jsonl:2: not an azr eval result line", err)


    def test_a_second_response_for_an_item_is_named(self):
        rc, _, err = self.run_script([row("s0", "a", False), row("s0", "b", False)], [row("s0", "a", False)])
        self.assertEqual(rc, 1)
        self.assertIn("a.jsonl:2: a second response for cruxeval_o s0 sample 0", err)

    def test_files_without_responses_fail(self):
        rc, _, err = self.run_script([], [])
        self.assertEqual(rc, 1)
        self.assertIn("hold no responses", err)

    def test_numeric_and_string_ids_sort_together(self):
        rc, out, err = self.run_script([row(7, "a", False), row("s1", "a", False)],
                                       [row("s1", "a", False), row(7, "b", False)])
        self.assertEqual(rc, 0, err)
        self.assertIn("1 of 2 responses the same text", out)


if __name__ == "__main__":
    unittest.main()
