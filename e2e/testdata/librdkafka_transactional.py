"""Transactional producer and read_committed/read_uncommitted consumers
with librdkafka (confluent-kafka), for TestTransactionsLibrdkafka.

usage: librdkafka_transactional.py BOOTSTRAP TOPIC

Produces two transactions to TOPIC (one partition): "commit-0".."commit-9"
committed, then "abort-0".."abort-4" aborted, then "after-0".."after-2"
committed; then reads TOPIC from the start at both isolation levels and
prints one JSON object: the values each consumer saw, in order.
"""
import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

bootstrap, topic = sys.argv[1], sys.argv[2]

p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "rdkafka-txn",
              "transaction.timeout.ms": 60000})
p.init_transactions(30)


def txn(prefix, n, commit):
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, value=("%s-%d" % (prefix, i)).encode(), partition=0)
    p.flush(30)
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


txn("commit", 10, True)
txn("abort", 5, False)
txn("after", 3, True)


def read(isolation, want):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "rdkafka-read-" + isolation,
                  "isolation.level": isolation, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.time() + 30
    while len(out) < want and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            raise KafkaException(m.error())
        out.append(m.value().decode())
    # Nothing more may come.
    end = time.time() + 1.5
    while time.time() < end:
        m = c.poll(0.3)
        if m is not None and not m.error():
            out.append(m.value().decode())
    c.close()
    return out


print(json.dumps({"read_committed": read("read_committed", 13),
                  "read_uncommitted": read("read_uncommitted", 18)}))
