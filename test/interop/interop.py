"""Interop checks with kafka-python and confluent-kafka (librdkafka)."""
import sys
import time
import uuid

addr = sys.argv[1]


def check(cond, what):
    if not cond:
        print("interop: FAIL:", what)
        sys.exit(1)
    print("interop: ok:", what)


def kafka_python():
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=addr, client_id="interop")
    topic = "py-" + uuid.uuid4().hex[:8]
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1, topic_configs={"retention.ms": "86400000"})])
    check(topic in admin.list_topics(), "kafka-python create/list topics")
    cfg = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    text = repr(cfg)
    check("retention.ms" in text and "86400000" in text, "kafka-python describe configs")

    producer = KafkaProducer(bootstrap_servers=addr, acks="all", compression_type="gzip")
    for i in range(300):
        producer.send(topic, key=str(i).encode(), value=("py-%d" % i).encode())
    producer.flush()
    producer.close()

    consumer = KafkaConsumer(topic, bootstrap_servers=addr, group_id="py-group", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    seen = set()
    deadline = time.time() + 60
    while len(seen) < 300 and time.time() < deadline:
        for msg in consumer:
            seen.add(msg.value)
            if len(seen) == 300:
                break
    check(len(seen) == 300, "kafka-python produce (gzip) and group consume: %d/300" % len(seen))
    consumer.commit()
    committed = sum(consumer.committed(TopicPartition(topic, p)) or 0 for p in range(3))
    check(committed == 300, "kafka-python commit: %d" % committed)
    consumer.close()
    admin.delete_topics([topic])
    admin.close()


def confluent():
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": addr})
    topic = "ck-" + uuid.uuid4().hex[:8]
    for f in admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)]).values():
        f.result(30)
    md = admin.list_topics(timeout=10)
    check(topic in md.topics and len(md.topics[topic].partitions) == 2, "confluent-kafka create/metadata")
    res = admin.describe_configs([ConfigResource("topic", topic)])
    for f in res.values():
        configs = f.result(30)
    check(configs["retention.ms"].value == "604800000", "confluent-kafka describe configs")

    producer = Producer({"bootstrap.servers": addr, "enable.idempotence": True, "compression.type": "zstd", "linger.ms": 5})
    errors = []
    for i in range(500):
        producer.produce(topic, key=str(i), value="ck-%d" % i, on_delivery=lambda err, msg: err and errors.append(err))
    producer.flush(30)
    check(not errors, "confluent-kafka idempotent zstd produce: %s" % errors[:3])

    consumer = Consumer({"bootstrap.servers": addr, "group.id": "ck-group", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = set()
    deadline = time.time() + 60
    while len(seen) < 500 and time.time() < deadline:
        msg = consumer.poll(1.0)
        if msg is None or msg.error():
            continue
        seen.add(msg.value())
    check(len(seen) == 500, "confluent-kafka group consume: %d/500" % len(seen))
    consumer.commit(asynchronous=False)
    offs = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
    check(sum(o.offset for o in offs) == 500, "confluent-kafka commit: %s" % offs)
    consumer.close()


kafka_python()
confluent()
