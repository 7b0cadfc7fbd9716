#!/bin/bash
# Build-time only: the pipeline's repository and the incoming batch.
set -euo pipefail
export GIT_AUTHOR_NAME=Dev GIT_AUTHOR_EMAIL=dev@example.test GIT_COMMITTER_NAME=Dev GIT_COMMITTER_EMAIL=dev@example.test
cd /app && git init -q -b main && git add pipeline.py config && git commit -qm "The monthly pipeline"
mkdir -p incoming && tar -C /tmp/batch -czf incoming/batch.tar.gz data && rm -rf /tmp/batch
