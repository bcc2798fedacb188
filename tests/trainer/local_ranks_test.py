#!/usr/bin/env python3
"""scripts/local_ranks.sh, which runs a command as N torchrun-style ranks on one machine: each
rank's variables, rank 0 on the terminal and the others in log files, a failing rank's status and
the others stopped, a signal to the launcher stopping every rank, and usage errors. The ranks are
small shell programs; tests/trainer/train_cli_test.cpp runs azr itself through it
(TwoTcpRanksMatchOneProcess). Handshakes through files order the ranks, not sleeps.

    python3 tests/trainer/local_ranks_test.py
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "local_ranks.sh")

# Waits (polling) for file $1, for at most a minute.
WAIT_FOR = 'wait_for() { i=0; while [ ! -e "$1" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; }'


def launch(n, program, d, *options, env=None, **kw):
    return subprocess.Popen(["bash", SCRIPT, str(n), "--logs", os.path.join(d, "logs"), *options, "--",
                             "sh", "-c", program, "rank", d],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw)


def read(path):
    with open(path) as f:
        return f.read()


class LocalRanks(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_each_rank_gets_torchruns_variables_and_one_port(self):
        program = 'echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT" > "$1/vars.$RANK"'
        p = launch(3, program, self.d, "--port", "29555")
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        for r in range(3):
            self.assertEqual(read(os.path.join(self.d, f"vars.{r}")).split(),
                             [str(r), "3", str(r), "3", "127.0.0.1", "29555"])

    def test_the_environments_port_is_the_default_and_every_rank_shares_it(self):
        env = dict(os.environ, MASTER_PORT="31234")
        p = launch(2, 'echo "$MASTER_PORT" > "$1/port.$RANK"', self.d, env=env)
        p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0)
        self.assertEqual([read(os.path.join(self.d, f"port.{r}")).strip() for r in range(2)], ["31234"] * 2)

    def test_rank_zero_writes_to_the_terminal_and_the_others_to_their_logs(self):
        p = launch(3, 'echo "hello from $RANK"', self.d)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(out, "hello from 0\n")
        for r in (1, 2):
            self.assertEqual(read(os.path.join(self.d, "logs", f"rank{r}.log")), f"hello from {r}\n")
        self.assertIn("3 ranks on port", err)

    def test_a_failing_rank_gives_its_status_and_the_others_are_stopped(self):
        # Rank 0 waits in "a collective" until told to stop; rank 1 fails once rank 0 is waiting.
        program = WAIT_FOR + '''
            if [ "$RANK" = 0 ]; then
              trap 'echo stopped > "$1/term.0"; exit 143' TERM
              touch "$1/ready.0"; while :; do sleep 0.1; done
            fi
            wait_for "$1/ready.0"; echo "rank 1 gives up"; exit 3'''
        p = launch(2, program, self.d)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 3)
        self.assertEqual(read(os.path.join(self.d, "term.0")), "stopped\n")
        self.assertIn("rank 1 exited with status 3; stopping the others", err)
        self.assertIn("[rank 1] rank 1 gives up", err)

    def test_the_first_failure_is_the_status_when_rank_zero_fails(self):
        program = WAIT_FOR + '''
            if [ "$RANK" = 0 ]; then wait_for "$1/ready.1"; exit 5; fi
            trap 'exit 143' TERM; touch "$1/ready.1"; while :; do sleep 0.1; done'''
        p = launch(2, program, self.d)
        p.communicate(timeout=60)
        self.assertEqual(p.returncode, 5)

    def test_ranks_that_a_signal_ends_are_reaped_and_the_status_is_the_failures(self):
        # Ranks 1 and 2 die of the SIGTERM that rank 0's failure brings (no handler), the case in
        # which bash drops a job from its table before wait -n sees it. Five times over: the loss
        # depended on which process bash started next.
        program = WAIT_FOR + '''
            if [ "$RANK" = 0 ]; then wait_for "$1/ready.1"; wait_for "$1/ready.2"; exit 3; fi
            touch "$1/ready.$RANK"; while :; do sleep 0.05; done'''
        for attempt in range(5):
            d = os.path.join(self.d, str(attempt))
            os.mkdir(d)
            p = launch(3, program, d)
            out, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 3, (attempt, err))

    def launch_and_signal(self, sig):
        program = '''trap 'echo stopped > "$1/term.$RANK"; exit 143' TERM
            touch "$1/ready.$RANK"; while :; do sleep 0.05; done'''
        p = launch(2, program, self.d)
        for r in range(2):
            for _ in range(600):
                if os.path.exists(os.path.join(self.d, f"ready.{r}")):
                    break
                time.sleep(0.1)
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
        # Every rank got SIGTERM (each rank's handler wrote its file) before the launcher exited.
        for r in range(2):
            self.assertEqual(read(os.path.join(self.d, f"term.{r}")), "stopped\n")
        return p.returncode, err

    def test_sigterm_to_the_launcher_passes_sigterm_to_every_rank(self):
        rc, err = self.launch_and_signal(signal.SIGTERM)
        self.assertEqual(rc, 143)
        self.assertIn("stopped by SIGTERM; stopping every rank", err)

    def test_sigint_to_the_launcher_passes_sigterm_not_a_second_sigint(self):
        # A terminal's Ctrl-C reaches every rank already; a second SIGINT would end azr at once.
        rc, err = self.launch_and_signal(signal.SIGINT)
        self.assertEqual(rc, 130)
        self.assertIn("stopped by SIGINT; stopping every rank", err)

    def test_usage_errors_exit_two(self):
        for args in (["0", "--", "true"], ["2", "true"], ["x", "--", "true"], ["2", "--port", "p", "--", "true"],
                     ["2", "--bogus", "--", "true"], ["2", "--"]):
            p = subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn("usage: scripts/local_ranks.sh N", p.stderr)


if __name__ == "__main__":
    unittest.main()
