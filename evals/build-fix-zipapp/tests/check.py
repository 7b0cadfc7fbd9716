"""A clean build, then the executable on a few inputs."""

import shutil
import subprocess
import sys

shutil.rmtree("/app/tool/dist", ignore_errors=True)
shutil.rmtree("/app/tool/build", ignore_errors=True)
built = subprocess.run(["./build.sh"], cwd="/app/tool", capture_output=True, text=True)
if built.returncode:
    sys.exit(f"build.sh failed: {built.stderr[-1500:]}")
for args, want in ((["2", "3"], "5"), (["2", "3.5"], "5.5"), ([], "0"), (["-1", "0.25"], "-0.75")):
    ran = subprocess.run(["/app/tool/dist/adder.pyz", *args], capture_output=True, text=True)
    if ran.stdout.strip() != want:
        sys.exit(f"adder.pyz {' '.join(args)} printed {ran.stdout.strip()!r} ({ran.stderr[-300:]}), not {want}")
