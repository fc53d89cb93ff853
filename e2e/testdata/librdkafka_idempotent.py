"""Produce numbered records with librdkafka's idempotent producer.

Usage: librdkafka_idempotent.py ADDR TOPIC PARTITIONS N [RATE]

Record i goes to partition i % PARTITIONS with the value
"<partition>:<sequence>", the sequence counting that partition's records
from 0, at most RATE records a second when RATE is given (a failover test
kills a leader meanwhile). ADDR may list several brokers, comma-separated.
Prints one JSON object: how many records were acknowledged and
failed, the first errors, and any fatal error.
"""
import json
import sys
import time

from confluent_kafka import KafkaError, Producer

addr, topic, partitions, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rate = float(sys.argv[5]) if len(sys.argv) > 5 else 0
acked = 0
failed = 0
errors = []
fatal = ""


def on_delivery(err, msg):
    global acked, failed
    if err is None:
        acked += 1
    else:
        failed += 1
        if len(errors) < 10:
            errors.append(str(err))


def on_error(err):
    global fatal
    if err.fatal():
        fatal = str(err)
    else:
        print("librdkafka:", err, file=sys.stderr)


producer = Producer({
    "bootstrap.servers": addr,
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    # Small batches, so that the records take hundreds of produce requests
    # rather than a few dozen.
    "batch.num.messages": 25,
    "retry.backoff.ms": 10,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 100,
    "message.timeout.ms": 60000,
    "error_cb": on_error,
})
seq = [0] * partitions
start = time.monotonic()
for i in range(n):
    if rate > 0 and i % 100 == 0:
        ahead = start + i / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        producer.poll(0)
    p = i % partitions
    value = ("%d:%d" % (p, seq[p])).encode()
    seq[p] += 1
    while True:
        try:
            producer.produce(topic, value=value, partition=p, on_delivery=on_delivery)
            break
        except BufferError:
            producer.poll(0.05)
    if i % 1000 == 0:
        producer.poll(0)
remaining = producer.flush(60)
print(json.dumps({"acked": acked, "failed": failed + remaining, "errors": errors, "fatal": fatal}))
