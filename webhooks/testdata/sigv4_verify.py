"""Checks an AWS Signature Version 4 with botocore, an implementation
keyhook does not share code with.

Reads one JSON request on stdin: method, url (as the receiver saw it),
headers (name -> value, as received, Host included), body (base64), and
the credentials and scope the signature must be made with. Exits 0 when
the signature and the payload hash are right; otherwise prints why and
exits 1.
"""
import base64
import hashlib
import json
import re
import sys

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<akid>[^/]+)/(?P<day>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, SignedHeaders=(?P<signed>[a-z0-9;-]+), "
    r"Signature=(?P<sig>[0-9a-f]{64})$"
)


def fail(msg):
    print(msg)
    sys.exit(1)


def main():
    req = json.load(sys.stdin)
    body = base64.b64decode(req["body"])
    headers = {k.lower(): v for k, v in req["headers"].items()}
    m = AUTH.match(headers.get("authorization", ""))
    if not m:
        fail("no SigV4 Authorization header")
    for field in ("region", "service"):
        if m.group(field) != req[field]:
            fail(f"{field} is {m.group(field)}, want {req[field]}")
    if m.group("akid") != req["access_key"]:
        fail("signed with another access key")
    if headers.get("x-amz-content-sha256") != hashlib.sha256(body).hexdigest():
        fail("x-amz-content-sha256 is not the body's hash")
    if not headers.get("x-amz-date", "").startswith(m.group("day")):
        fail("x-amz-date is not the credential scope's day")
    signed = m.group("signed").split(";")
    for required in ("host", "x-amz-date", "x-amz-content-sha256"):
        if required not in signed:
            fail(f"{required} is not signed")
    if req.get("token") and "x-amz-security-token" not in signed:
        fail("x-amz-security-token is not signed")
    # The receiver's view, as AWS has it: only the signed headers count.
    aws_req = AWSRequest(method=req["method"], url=req["url"], data=body,
                         headers={name: headers[name] for name in signed})
    aws_req.context["timestamp"] = headers["x-amz-date"]
    signer = SigV4Auth(Credentials(req["access_key"], req["secret_key"], req.get("token") or None),
                       req["service"], req["region"])
    canonical = signer.canonical_request(aws_req)
    want = signer.signature(signer.string_to_sign(aws_req, canonical), aws_req)
    if want != m.group("sig"):
        fail("signature mismatch; botocore's canonical request:\n" + canonical)
    print("ok")


main()
