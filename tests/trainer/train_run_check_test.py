#!/usr/bin/env python3
"""scripts/train_run_check.py, which says whether a run on new hardware trained (gpu_check.sh
pending's end-to-end run on a GPU), against metrics.jsonl files written by hand in the format of
trainer/metrics.cpp's metrics_json_line: one line a step, evaluation scores merged into their
step's line, a step-0 line for an evaluation before training, non-finite values as null.

    python3 tests/trainer/train_run_check_test.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CHECK = os.path.join(ROOT, "scripts", "train_run_check.py")


def step_line(step, loss=0.5, grad_norm=1.25, trained=120, **extra):
    line = {"step": step, "time": 1.7e9 + step, "loss/total": loss, "loss/pg": -0.01,
            "optim/grad_norm": grad_norm, "tokens/trained": trained, "solver/accuracy": 0.25}
    line.update(extra)
    return json.dumps(line)


class TrainRunCheck(unittest.TestCase):
    def run_check(self, lines, steps, write=True, *extra):
        with tempfile.TemporaryDirectory() as run:
            if write:
                with open(os.path.join(run, "metrics.jsonl"), "w") as f:
                    f.write("".join(line + "\n" for line in lines))
            p = subprocess.run([sys.executable, CHECK, run, "--steps", str(steps), *extra],
                               capture_output=True, text=True)
        return p.returncode, p.stdout, p.stderr

    def assert_fails_naming(self, lines, steps, message, *extra, write=True):
        """The check exits 1 with `message` in its stderr."""
        rc, _, err = self.run_check(lines, steps, write, *extra)
        self.assertEqual(rc, 1)
        self.assertIn(message, err)

    def test_a_run_of_every_step_passes_and_shows_each_step_and_evaluation(self):
        lines = [json.dumps({"step": 0, "time": 1.7e9, "eval/cruxeval_o/pass@1": 0.125}),
                 step_line(1), step_line(2, **{"eval/cruxeval_o/pass@1": 0.1875}), step_line(3, loss=0.25)]
        rc, out, err = self.run_check(lines, 3)
        self.assertEqual(rc, 0, err)
        rows = [r.split() for r in out.splitlines()]
        self.assertEqual(rows[0][:2], ["step", "loss"])
        self.assertEqual([r[0] for r in rows[1:4]], ["1", "2", "3"])
        self.assertEqual(rows[3][1], "0.2500")
        self.assertIn("evaluation at step 0: eval/cruxeval_o/pass@1 0.125", out)
        self.assertIn("evaluation at step 2: eval/cruxeval_o/pass@1 0.188", out)

    def test_a_missing_step_is_named(self):
        self.assert_fails_naming([step_line(1), step_line(3)], 3, "no line for step 2 of 1..3")

    def test_a_run_that_stopped_early_names_every_step_it_lacks(self):
        self.assert_fails_naming([step_line(1)], 3, "no line for steps 2, 3 of 1..3")

    def test_a_step_written_twice_is_named_with_its_line(self):
        self.assert_fails_naming([step_line(1), step_line(2), step_line(2)], 2, "metrics.jsonl:3: step 2 written twice")

    def test_a_step_past_the_runs_end_fails(self):
        self.assert_fails_naming([step_line(1), step_line(2)], 1, ":2: step 2 outside 1..1")

    def test_a_non_finite_loss_on_a_trained_step_fails(self):
        self.assert_fails_naming([step_line(1), step_line(2, loss=None)], 2,
                                 ":2: step 2 trained tokens but loss/total is null")

    def test_a_non_finite_gradient_norm_fails(self):
        self.assert_fails_naming([step_line(1, grad_norm=None)], 1, "step 1 trained tokens but optim/grad_norm is null")

    def test_a_trained_step_without_a_loss_fails(self):
        line = json.loads(step_line(1))
        del line["loss/total"]
        self.assert_fails_naming([json.dumps(line)], 1, "loss/total is missing")

    def test_a_step_that_trained_nothing_may_have_no_loss(self):
        rc, out, err = self.run_check([step_line(1, loss=None, grad_norm=None, trained=0), step_line(2)], 2)
        self.assertEqual(rc, 0, err)
        self.assertIn("null", out.splitlines()[1])

    def test_a_run_where_no_step_trained_fails(self):
        self.assert_fails_naming([step_line(1, trained=0), step_line(2, trained=0)], 2,
                                 "no step of 1..2 trained a token")

    def test_a_torn_line_is_named(self):
        self.assert_fails_naming([step_line(1), '{"step": 2, "loss/tot'], 2, "metrics.jsonl:2: not JSON")

    def test_a_line_without_a_step_is_named(self):
        self.assert_fails_naming([json.dumps({"time": 1.0})], 1, "metrics.jsonl:1: no integer 'step'")

    def test_a_run_dir_without_metrics_fails(self):
        self.assert_fails_naming([], 1, "metrics.jsonl: cannot read", write=False)

    def test_replicas_asks_every_step_for_identical_ranks(self):
        lines = [step_line(1, **{"replicas/identical": 1.0}), step_line(2, **{"replicas/identical": 1.0})]
        rc, out, err = self.run_check(lines, 2, True, "--replicas")
        self.assertEqual(rc, 0, err)
        self.assertIn("every rank's weights identical", out)
        self.assert_fails_naming([lines[0], step_line(2)], 2,
                                 ":2: step 2 does not say its ranks held identical weights "
                                 "(replicas/identical is null)", "--replicas")
        rc, _, err = self.run_check([step_line(1)], 1)
        self.assertEqual(rc, 0, err)

    def test_steps_below_one_is_a_usage_error(self):
        rc, _, err = self.run_check([step_line(1)], 0)
        self.assertEqual(rc, 2)
        self.assertIn("--steps must be at least 1", err)


if __name__ == "__main__":
    unittest.main()
