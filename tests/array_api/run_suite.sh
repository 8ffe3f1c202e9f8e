#!/bin/sh
# Run the pinned array-api-tests against dmath.array_api. Usage (from the dmath checkout):
#   tests/array_api/run_suite.sh [pytest args...]      e.g. array_api_tests/test_has_names.py
# Env: SUITE (default /work/shared/array-api-tests or ../shared/array-api-tests), PY.
HERE=$(cd "$(dirname "$0")/../.." && pwd)
SUITE=${SUITE:-$HERE/../shared/array-api-tests}
[ -d "$SUITE" ] || SUITE=/work/shared/array-api-tests
PY=${PY:-python}
cd "$SUITE" && PYTHONPATH="$HERE:$SUITE" ARRAY_API_TESTS_MODULE=dmath.array_api \
  ARRAY_API_TESTS_VERSION=2024.12 ARRAY_API_TESTS_SKIP_DTYPES=uint16,uint32,uint64 \
  exec $PY -m pytest -p tests.array_api.plugin -p no:cacheprovider --disable-deadline \
  --derandomize "$@"
