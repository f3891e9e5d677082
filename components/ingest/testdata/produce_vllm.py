"""Produces vLLM msgpack KV-event batches to Kafka with kafka-python, the way a
Python bridge next to a vLLM engine would: the engine's payload unchanged, the
sluice-* headers carrying what msgpack lacks. Usage: produce_vllm.py BROKERS TOPIC
"""
import sys
import time

import msgpack
from kafka import KafkaProducer

brokers, topic = sys.argv[1].split(","), sys.argv[2]
producer = KafkaProducer(bootstrap_servers=brokers, acks="all")


def send(engine, epoch, seq, batch):
    producer.send(
        topic,
        key=engine.encode(),
        value=msgpack.packb(batch),
        headers=[
            ("sluice-format", b"vllm.msgpack"),
            ("sluice-epoch", str(epoch).encode()),
            ("sluice-seq", str(seq).encode()),
            ("sluice-model", b"Qwen/Qwen3-8B"),
        ],
    )


# Positional (vLLM <= 0.23) event, uint64 hash >= 2^63.
send("py-engine", 1, 1, [time.time(), [["BlockStored", [15760518052499183552], None, list(range(16)), 16, None, "GPU"]], 0])
# Map-form (vLLM 0.26) event chained to the first block.
send("py-engine", 1, 2, [time.time(), [{
    "type": "BlockStored", "block_hashes": [2**64 - 5, 7], "parent_block_hash": 15760518052499183552,
    "token_ids": list(range(16, 48)), "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None,
    "group_idx": 0, "kv_cache_spec_kind": "full_attention"}], 0])
# Eviction of one of them.
send("py-engine", 1, 3, [time.time(), [["BlockRemoved", [7], "GPU"]], 0])
# A bad record: not msgpack at all.
producer.send(topic, key=b"py-engine", value=b"\xc1garbage", headers=[("sluice-format", b"vllm.msgpack"),
              ("sluice-epoch", b"1"), ("sluice-seq", b"4"), ("sluice-model", b"Qwen/Qwen3-8B")])
producer.flush(timeout=60)
producer.close()
print("produced 4 records")
