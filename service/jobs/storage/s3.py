"""An S3-compatible bucket (AWS, MinIO, Ceph, R2, SeaweedFS): its URL, a client built from the
usual AWS variables, and its failures in our words.

``QUANTCOMPARE_STORAGE_URL=s3://bucket/prefix``; everything else is boto3's own configuration:
``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``; unset = AWS), ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``, a profile or an instance role.
With an endpoint set, requests use path-style addresses (``http://host:9000/bucket/key``), which
every S3-compatible server answers; AWS itself keeps boto3's choice.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

from service.config import ConfigurationError

CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 60


@dataclass(frozen=True)
class BucketLocation:
    bucket: str
    prefix: str  # "" or ending in "/"

    def key(self, rel: str) -> str:
        return self.prefix + rel

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def location_of(url: str) -> BucketLocation:
    """``s3://bucket/prefix`` (``Settings`` checked its form) as a bucket and a key prefix."""
    parts = urlsplit(url)
    prefix = parts.path.strip("/")
    return BucketLocation(bucket=parts.netloc, prefix=prefix + "/" if prefix else "")


def make_client(*, connect_timeout: float = CONNECT_TIMEOUT_S, read_timeout: float = READ_TIMEOUT_S,
                max_attempts: int = 3):
    import boto3
    from botocore.config import Config

    custom_endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    config = Config(connect_timeout=connect_timeout, read_timeout=read_timeout, signature_version="s3v4",
                    retries={"mode": "standard", "max_attempts": max_attempts},
                    s3={"addressing_style": "path" if custom_endpoint else "auto"})
    return boto3.session.Session().client("s3", region_name=region, config=config)


def error_code(e: BaseException) -> str | None:
    response = getattr(e, "response", None)
    return (response or {}).get("Error", {}).get("Code") if isinstance(response, dict) else None


def is_missing(e: BaseException) -> bool:
    return error_code(e) in ("NoSuchKey", "404", "NotFound")


def explain(e: BaseException) -> str:
    """One line: the server's code and message, or botocore's own words for a transport failure."""
    response = getattr(e, "response", None)
    if isinstance(response, dict) and "Error" in response:
        err = response["Error"]
        return f"{err.get('Code', '?')}: {err.get('Message') or 'no message'}"
    return str(e).strip() or type(e).__name__


_DENIED = {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken",
           "InvalidSecurity", "AuthorizationHeaderMalformed"}


def check_bucket(client, location: BucketLocation) -> None:
    """Start-up probe: list, write and delete one object under the prefix, or say what is wrong."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

    where = f"{location.url} at {client.meta.endpoint_url}"
    probe = location.key(f".quantcompare-probe-{uuid.uuid4().hex}")
    try:
        client.list_objects_v2(Bucket=location.bucket, Prefix=location.prefix, MaxKeys=1)
        client.put_object(Bucket=location.bucket, Key=probe, Body=b"quantcompare start-up probe")
        client.delete_object(Bucket=location.bucket, Key=probe)
    except (NoCredentialsError, PartialCredentialsError) as e:
        raise ConfigurationError(f"QUANTCOMPARE_STORAGE_URL: no usable S3 credentials for {where} ({explain(e)}): set "
                                 "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile or role)") from None
    except ClientError as e:
        code = error_code(e)
        if code in ("NoSuchBucket", "404"):
            raise ConfigurationError(f"QUANTCOMPARE_STORAGE_URL: the bucket {location.bucket!r} does not exist at "
                                     f"{client.meta.endpoint_url}: create it, or fix the URL") from None
        if code in _DENIED:
            raise ConfigurationError(f"QUANTCOMPARE_STORAGE_URL: {client.meta.endpoint_url} refused the credentials "
                                     f"for {location.url} ({explain(e)}): check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, "
                                     "and that they may list, read, write and delete objects under the prefix") from None
        raise ConfigurationError(f"QUANTCOMPARE_STORAGE_URL: {where} refused the start-up probe ({explain(e)})") from None
    except BotoCoreError as e:
        raise ConfigurationError(f"QUANTCOMPARE_STORAGE_URL: cannot reach the S3 endpoint {client.meta.endpoint_url} "
                                 f"({explain(e)}): check AWS_ENDPOINT_URL and that the server is up") from None
