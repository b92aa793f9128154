#!/bin/sh
# Spark's Python, as rxhubs.spark.local_session sets it (PYSPARK_PYTHON): runs $RXHUBS_SPARK_PYTHON, except
# that the streaming-source runner starts through _worker_start.py, which connects back to the JVM before its
# imports (Spark gives that process 10 s, fixed; see _worker_start.py).
python="${RXHUBS_SPARK_PYTHON:-}"
if [ -z "$python" ]; then  # another interpreter would fail later, and less clearly (a missing pyarrow)
    echo "rxhubs: RXHUBS_SPARK_PYTHON is not set for this Spark worker (local_session sets it, and" \
         "spark.executorEnv.RXHUBS_SPARK_PYTHON for executors)" >&2
    exit 1
fi
if [ "$1" = "-m" ] && [ "$2" = "pyspark.sql.streaming.python_streaming_source_runner" ]; then
    exec "$python" "$(dirname "$0")/_worker_start.py" "$@"
fi
exec "$python" "$@"
