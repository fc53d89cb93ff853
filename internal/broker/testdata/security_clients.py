"""Produce and consume over a secured listener with kafka-python or
confluent-kafka (librdkafka), as the Go tests in security_*_test.go ask.

Usage: security_clients.py kafka-python|confluent '<json settings>'
Settings: bootstrap, topic, protocol (SSL, SASL_PLAINTEXT, SASL_SSL), ca,
cert, key, mechanism, username, password, token (OAUTHBEARER's JWT),
expect ("ok" or "fail").
Prints "ok N" after reading back the N records it wrote, or "refused: ..."
when the broker refused it, followed by the warnings and errors the
library logged or reported (kafka-python only says NoBrokersAvailable; its
log says why); exits 0 when the outcome is the expected one.
"""
import json
import logging
import sys
import time

lib, s = sys.argv[1], json.loads(sys.argv[2])
N = 20
reported = []  # what the library logged or reported as errors


class Collect(logging.Handler):
    def emit(self, record):
        msg = record.getMessage()
        if msg not in reported and len(reported) < 10:
            reported.append(msg)


logging.getLogger("kafka").addHandler(Collect(logging.WARNING))
logging.getLogger("kafka").setLevel(logging.WARNING)
logging.getLogger("kafka").propagate = False


def kafka_python():
    from kafka import KafkaConsumer, KafkaProducer
    common = dict(bootstrap_servers=s["bootstrap"], security_protocol=s["protocol"], request_timeout_ms=15000,
                  api_version_auto_timeout_ms=10000)
    if "ca" in s:
        common.update(ssl_cafile=s["ca"], ssl_check_hostname=True)
    if "cert" in s:
        common.update(ssl_certfile=s["cert"], ssl_keyfile=s["key"])
    if s.get("mechanism") == "OAUTHBEARER":
        from kafka.oauth.abstract import AbstractTokenProvider

        class Token(AbstractTokenProvider):
            def token(self):
                return s["token"]
        common.update(sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Token())
    elif "mechanism" in s:
        common.update(sasl_mechanism=s["mechanism"], sasl_plain_username=s["username"], sasl_plain_password=s["password"])
    producer = KafkaProducer(acks="all", max_block_ms=15000, **common)
    for i in range(N):
        producer.send(s["topic"], value=("py-%d" % i).encode()).get(timeout=15)
    producer.close()
    consumer = KafkaConsumer(s["topic"], auto_offset_reset="earliest", consumer_timeout_ms=3000,
                             enable_auto_commit=False, **common)
    seen = 0
    deadline = time.time() + 30
    while seen < N and time.time() < deadline:
        for _ in consumer:
            seen += 1
            if seen == N:
                break
    consumer.close()
    return seen


def confluent():
    from confluent_kafka import Consumer, KafkaException, Producer
    conf = {"bootstrap.servers": s["bootstrap"], "security.protocol": s["protocol"]}
    if "ca" in s:
        conf["ssl.ca.location"] = s["ca"]
    if "cert" in s:
        conf.update({"ssl.certificate.location": s["cert"], "ssl.key.location": s["key"]})
    if s.get("mechanism") == "OAUTHBEARER":
        # oauth_cb hands librdkafka the token and its expiry (epoch seconds).
        conf.update({"sasl.mechanism": "OAUTHBEARER", "oauth_cb": lambda _: (s["token"], time.time() + 3600)})
    elif "mechanism" in s:
        conf.update({"sasl.mechanism": s["mechanism"], "sasl.username": s["username"], "sasl.password": s["password"]})
    errors = []

    def on_error(e):
        errors.append(e)
        if str(e) not in reported and len(reported) < 10:
            reported.append(str(e))
    conf["error_cb"] = on_error
    p = Producer(dict(conf, **{"message.timeout.ms": 15000}))
    delivered = []
    for i in range(N):
        p.produce(s["topic"], value=("ck-%d" % i).encode(), on_delivery=lambda err, m: delivered.append(err))
    deadline = time.time() + 20
    while len(delivered) < N and time.time() < deadline:
        p.poll(0.2)
        if errors and s.get("expect") == "fail":
            # librdkafka retries a refused connection until the message
            # times out; its first error already says why.
            raise KafkaException("refused: %s" % errors[0])
    if len(delivered) != N or any(delivered):
        raise KafkaException("delivery failed: %s %s" % ([str(e) for e in delivered if e][:1], [str(e) for e in errors][:2]))
    c = Consumer(dict(conf, **{"group.id": "sec-" + s["topic"], "auto.offset.reset": "earliest"}))
    c.subscribe([s["topic"]])
    seen = 0
    deadline = time.time() + 30
    while seen < N and time.time() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            seen += 1
    c.close()
    return seen


try:
    seen = {"kafka-python": kafka_python, "confluent": confluent}[lib]()
    outcome = "ok" if seen >= N else "short"
    print("%s %d" % (outcome, seen))
except Exception as e:  # the refusals this test expects surface as exceptions
    outcome = "fail"
    print("refused: %s: %s | reported: %s" % (type(e).__name__, e, " | ".join(reported)))
sys.exit(0 if outcome == s.get("expect", "ok") else 1)
