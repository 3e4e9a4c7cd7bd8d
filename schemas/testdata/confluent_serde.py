"""Serializes a table of records with confluent-kafka's own serializers
(AvroSerializer with fastavro, ProtobufSerializer, JSONSerializer), talking
to the Schema Registry at argv[1], and deserializes each with the matching
deserializer. It prints one JSON line per record: its name, format, the
serialized bytes (base64) and the deserialized value made JSON with the
mapping docs/api.md documents, which keyhook's decoding must reproduce.

Usage: python confluent_serde.py REGISTRY_URL WORKDIR
(the Protobuf classes are generated into WORKDIR with grpcio-tools' protoc).
"""

import base64
import datetime
import decimal
import json
import os
import sys
import uuid

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

HERE = os.path.dirname(os.path.abspath(__file__))


def as_json(v):
    """The documented mapping of a deserialized Avro value to JSON."""
    if isinstance(v, dict):
        return {k: as_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [as_json(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return base64.standard_b64encode(bytes(v)).decode("ascii")
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, datetime.datetime):
        v = v.astimezone(datetime.timezone.utc)
        s = v.strftime("%Y-%m-%dT%H:%M:%S")
        if v.microsecond:
            s += "." + ("%06d" % v.microsecond).rstrip("0")
        return s + "Z"
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, uuid.UUID):
        return str(v)
    return v


def emit(name, fmt, wire, want):
    print(json.dumps({"name": name, "format": fmt,
                      "wire": base64.standard_b64encode(wire).decode("ascii"),
                      "want": want}), flush=True)


ORDER_V1 = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "customer_id", "type": "long"},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_micros", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
            {"name": "id", "type": "string"},
            {"name": "tier", "type": ["null", {"type": "enum", "name": "Tier", "symbols": ["GOLD", "SILVER"]}], "default": None},
        ]}},
        {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
            {"name": "sku", "type": "string"},
            {"name": "quantity", "type": "int"},
            {"name": "price", "type": ["null", "double", "string"]},
        ]}}},
        {"name": "counters", "type": {"type": "map", "values": "long"}},
        {"name": "signature", "type": "bytes"},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "ratio", "type": "float"},
        {"name": "gift", "type": "boolean"},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}

ORDER_V2 = json.loads(json.dumps(ORDER_V1))
ORDER_V2["fields"].append({"name": "channel", "type": "string", "default": "web"})
ORDER_V2["fields"].append({"name": "discount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 3}], "default": None})


def order(**over):
    v = {
        "order_id": "o-1", "customer_id": 9007199254740993, "status": "PAID",
        "amount": decimal.Decimal("1234.50"),
        "at": datetime.datetime(2026, 12, 3, 17, 0, 0, 123000, tzinfo=datetime.timezone.utc),
        "at_micros": datetime.datetime(2026, 12, 3, 17, 0, 0, 123456, tzinfo=datetime.timezone.utc),
        "day": datetime.date(2026, 12, 3),
        "note": None,
        "customer": {"id": "c-9", "tier": "GOLD"},
        "items": [{"sku": "a", "quantity": 1, "price": 2.5}, {"sku": "b", "quantity": 2, "price": "on request"},
                  {"sku": "c", "quantity": 3, "price": None}],
        "counters": {"views": 3, "big": -9007199254740993},
        "signature": b"\x00\xff\x10",
        "hash": b"\xde\xad\xbe\xef",
        "ratio": 0.1,
        "gift": True,
        "ref": uuid.UUID("6f1c2a36-9b7e-4a8e-8f5e-0d9b2f1c3a4e"),
    }
    v.update(over)
    return v


def avro_cases(client):
    ctx = SerializationContext("orders", MessageField.VALUE)
    de = AvroDeserializer(client)
    v1 = AvroSerializer(client, json.dumps(ORDER_V1))
    v2 = AvroSerializer(client, json.dumps(ORDER_V2))
    cases = [
        ("avro: every type", v1, order()),
        ("avro: null union, negative decimal, empty collections", v1,
         order(note="gift wrap", amount=decimal.Decimal("-0.05"), items=[], counters={}, signature=b"",
               customer={"id": "c-1", "tier": None}, status="NEW")),
        ("avro: schema evolution, version 2 on the same subject", v2,
         order(channel="app", discount=decimal.Decimal("0.125"))),
        ("avro: version 2, defaults", v2, order(channel="web", discount=None)),
    ]
    for name, ser, value in cases:
        wire = ser(value, ctx)
        emit(name, "avro", wire, as_json(de(wire, ctx)))


def protobuf_cases(client, workdir):
    from grpc_tools import protoc
    import grpc_tools
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main(["protoc", "-I" + HERE, "-I" + include, "--python_out=" + workdir,
                      os.path.join(HERE, "shop.proto"), os.path.join(HERE, "shop", "common.proto")])
    if rc != 0:
        raise SystemExit("protoc failed: %d" % rc)
    sys.path.insert(0, workdir)
    import shop_pb2
    from shop import common_pb2
    from google.protobuf.json_format import MessageToDict

    ctx = SerializationContext("orders-proto", MessageField.VALUE)
    conf = {"use.deprecated.format": False}
    cases = [
        ("protobuf: nested, repeated, map, oneof, int64, timestamp, reference", shop_pb2.Order, shop_pb2.Order(
            order_id="o-1", customer_id=9007199254740993, sequence=18446744073709551615,
            status=shop_pb2.Order.PAID,
            items=[shop_pb2.Order.Item(sku="a", quantity=1), shop_pb2.Order.Item(sku="b", quantity=2)],
            counters={"views": 3, "big": -9007199254740993}, card_last4="4242",
            signature=b"\x00\xff\x10", at={"seconds": 1796317200, "nanos": 123000000},
            total=common_pb2.Money(currency="EUR", units=1234, nanos=500000000), weight=2.5, gift=True,
            tags=["x", "y"])),
        ("protobuf: defaults and the other oneof branch", shop_pb2.Order, shop_pb2.Order(order_id="o-2", iban="DE89")),
        ("protobuf: a nested message type (indexes [1, 0])", shop_pb2.Order.Item, shop_pb2.Order.Item(sku="z", quantity=7)),
        ("protobuf: the first message (index shortcut 0)", shop_pb2.Ping, shop_pb2.Ping(id="p")),
    ]
    for name, cls, msg in cases:
        ser = ProtobufSerializer(cls, client, conf)
        de = ProtobufDeserializer(cls, {"use.deprecated.format": False})
        wire = ser(msg, ctx)
        got = de(wire, ctx)
        emit(name, "protobuf", wire, MessageToDict(got, preserving_proto_field_name=True,
                                                   always_print_fields_with_no_presence=True))


EVENT_SCHEMA = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Event", "type": "object",
    "properties": {
        "type": {"type": "string"},
        "id": {"type": "integer"},
        "amount": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "meta": {"type": "object"},
        "note": {"type": ["string", "null"]},
    },
    "required": ["type", "id"],
})


def json_schema_cases(client):
    ctx = SerializationContext("events", MessageField.VALUE)
    ser = JSONSerializer(EVENT_SCHEMA, client)
    de = JSONDeserializer(EVENT_SCHEMA)
    for name, value in [
        ("json_schema: object, big integer, nested", {"type": "order.paid", "id": 9007199254740993, "amount": 12.5,
                                                       "tags": ["a"], "meta": {"k": {"n": [1, 2]}}, "note": None}),
        ("json_schema: unicode", {"type": "note", "id": 1, "note": "h\u00e9llo \u2603"}),
    ]:
        wire = ser(value, ctx)
        emit(name, "json_schema", wire, de(wire, ctx))


def main():
    client = SchemaRegistryClient({"url": sys.argv[1]})
    avro_cases(client)
    protobuf_cases(client, sys.argv[2])
    json_schema_cases(client)


if __name__ == "__main__":
    main()
