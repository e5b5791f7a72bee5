"""Record docs/tour.txt: run the tour commands in a fresh directory, print the transcript.

Usage: python scripts/record_tour.py > docs/tour.txt
"""

import json
import os
import subprocess
import sys
import tempfile

work = tempfile.mkdtemp(prefix="tour-")
env = {k: v for k, v in os.environ.items() if k not in ("TACHOGRAPH_STORE", "FORCE_COLOR")}
env["COLUMNS"] = "100"
out = []


def sh(cmd, show=None):
    proc = subprocess.run(
        cmd,
        shell=True,
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out.append(f"$ {show or cmd}")
    text = proc.stdout
    if text:
        out.append(text.rstrip("\n"))
    return proc


def comment(text):
    out.append("")
    out.append(f"# {text}")


comment("1. one command: record, verify, show, replay, catch a change, catch an edit")
sh("tacho demo")
run = json.loads(
    subprocess.run(
        "tacho runs --json", shell=True, cwd=work, env=env, capture_output=True, text=True
    ).stdout
)["runs"][0]["run_id"]
comment("2. the runs in the store (./.tachograph/tachograph.db by default)")
sh("tacho runs")
comment("3. the timeline of a run; a unique prefix of the id is enough")
sh(f"tacho show {run[:14]}")
comment("4. what the agent knew at step 9: the refund is pending (requested, not completed)")
sh(f"tacho state {run} --at 9 | head -n 12")
PENDING = 'import json,sys; print(json.dumps(json.load(sys.stdin)["pending"], indent=2))'
sh(f"tacho state {run} --at 9 --json | python3 -c '{PENDING}'")
comment("5. verify every run in the store")
sh("tacho verify")
comment("6. replay the same code: reproduced, exit 0")
sh(f'tacho replay {run} --agent tachograph.demo.agent:billing_agent; echo "exit code $?"')
comment("7. replay a changed agent: the divergence at the exact step, exit 1")
sh(f'tacho replay {run} --agent tachograph.demo.agent:billing_agent_v2; echo "exit code $?"')
comment("8. fork at step 7 with the changed agent; the refund runs in dry run")
p = sh(f"tacho fork {run} --at 7 --agent tachograph.demo.agent:billing_agent_v2")
fork = p.stdout.strip().splitlines()[-1].removeprefix("new run: ")
sh(f"tacho show {fork}")
comment("9. where the two runs first differ")
sh(f'tacho diff {run} {fork}; echo "exit code $?"')
comment("10. export, verify the file, import it into another store")
sh(f"tacho export {run} -o run.jsonl")
sh("tacho verify run.jsonl")
sh("tacho --store other.db import run.jsonl")
comment("11. edit the refund amount in the file: verify and import both refuse it")
sh('sed -i \'10s/"amount_cents":2500}/"amount_cents":25000}/\' run.jsonl')
sh('tacho verify run.jsonl; echo "exit code $?"')
sh('tacho --store fresh.db import run.jsonl; echo "exit code $?"')
comment("12. errors say what to do")
sh(f'tacho show {run[:-2]}XX; echo "exit code $?"')
sh('tacho --store typo.db runs; echo "exit code $?"')
sh(f'tacho replay {run} --agent tachograph.demo.agent:billing_agnet; echo "exit code $?"')
comment("13. every read command speaks JSON for scripts")
sh(f"tacho verify {run} --json")
text = "\n".join(out).lstrip("\n") + "\n"
text = text.replace(work, "~/tour")
head = (
    "# A terminal session of the tour, recorded by running the commands one after the other\n"
    "# in an empty directory (shown as ~/tour) with tachograph installed. The output is plain\n"
    "# text because it was captured through a pipe; on a terminal the same commands print\n"
    "# in colour, with tables and progress bars.\n\n"
)
sys.stdout.write(head + text)
