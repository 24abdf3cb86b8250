"""Job files in an S3-compatible bucket (``QUANTCOMPARE_STORAGE_URL=s3://bucket/prefix``).

Keys keep the job folder's layout under ``<prefix>jobs/<id>/``::

    job.json, input/...         stored by the API at submission, before the job's row exists
    artifacts/<name>            stored by the worker, each distinct content once
    files.json                  the manifest: artifacts/<name> -> the key holding it, its size
    report.json.gz              stored last: its presence means "succeeded"

A reader never sees a half-written file: an object appears whole when its PUT (or multipart
upload) completes, and the report goes up only after every artifact and the manifest. Identical
files of one job are stored once (the fp32 artifact of an ONNX upload is the upload itself): the
worker's job folder has them hard-linked (``disk.dedupe_job_files``), and the manifest points every
name of one inode at the one key. A worker copies ``job.json`` and ``input/`` into a scratch
folder under its own ``<data_dir>/jobs``, runs the job there, stores the results, and deletes the
folder. Credentials stay in the supervising process: the job processes start from a clean
environment (``worker.WORKER_ENV_KEEP``) and never talk to the bucket.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path, PurePosixPath
from typing import Iterator

from service.config import Settings
from service.errors import StorageUnavailable
from service.jobs.spec import ARTIFACTS_DIR, INPUT_DIR, LEGACY_REPORT_FILE, PARTIAL_REPORT_FILE, REPORT_FILE, SPEC_FILE, JobSpec
from service.jobs.storage.disk import JobOnDisk
from service.jobs.storage.files import SAFE_NAME, Download
from service.jobs.storage.folders import last_changed
from service.jobs.storage.report_file import report_json, stored_partial_report, stored_report
from service.jobs.storage.s3 import check_bucket, explain, is_missing, location_of, make_client
from service.jobs.store import JobRecord

log = logging.getLogger("quantcompare.storage")

JOBS_PREFIX = "jobs/"
MANIFEST_FILE = "files.json"
PRESIGNED_URL_EXPIRES_S = 300
CHUNK_BYTES = 1 << 20
_RETRY_HINT = "retry after the time in the Retry-After header; if it persists, the operator should check the bucket"


def _inode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def _chunks(body) -> Iterator[bytes]:
    try:
        yield from body.iter_chunks(CHUNK_BYTES)
    finally:  # a client that went away mid-download must not keep the connection checked out
        body.close()


def _safe_relative(rel: str) -> bool:
    parts = PurePosixPath(rel).parts
    return bool(parts) and not PurePosixPath(rel).is_absolute() and ".." not in parts


class BucketFiles:
    stores_elsewhere = True

    def __init__(self, settings: Settings, client=None):
        self.location = location_of(settings.storage_url)
        self.client = client or make_client()
        self.bucket = self.location.bucket
        self.scratch = settings.jobs_dir  # this machine's: one folder per job running here
        self.redirect = settings.storage_downloads == "redirect"
        self._partials: dict[str, int] = {}  # job -> mtime of the partial report last stored

    def describe(self) -> str:
        return f"bucket {self.location.url} at {self.client.meta.endpoint_url}"

    def check(self) -> None:
        check_bucket(self.client, self.location)
        self.scratch.mkdir(parents=True, exist_ok=True)

    def probe(self, timeout_s: float) -> None:
        """Readiness: the bucket answers a HEAD within ``timeout_s``, one try (StorageUnavailable if not)."""
        if getattr(self, "_probe_client", None) is None:
            self._probe_client = make_client(connect_timeout=timeout_s, read_timeout=timeout_s, max_attempts=1)
        self._call("answer a HEAD of the bucket", self._probe_client.head_bucket, Bucket=self.bucket)

    # -- keys and calls ----------------------------------------------------------------------
    def _key(self, job_id: str, rel: str = "") -> str:
        return self.location.key(f"{JOBS_PREFIX}{job_id}/{rel}")

    def _call(self, what: str, fn, /, **kw):
        """One S3 call; a missing key is FileNotFoundError, any other failure StorageUnavailable."""
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(**kw)
        except ClientError as e:
            if is_missing(e):
                raise FileNotFoundError(f"{what}: no such object") from None
            raise StorageUnavailable(f"the file storage refused to {what} ({explain(e)})", hint=_RETRY_HINT) from None
        except (BotoCoreError, Boto3Error) as e:  # Boto3Error: upload_file's S3UploadFailedError and kin
            raise StorageUnavailable(f"the file storage could not {what} ({explain(e)})", hint=_RETRY_HINT) from None

    def _objects(self, prefix: str) -> Iterator[dict]:
        token = None
        while True:
            kw = {"Bucket": self.bucket, "Prefix": prefix, **({"ContinuationToken": token} if token else {})}
            page = self._call("list the stored files", self.client.list_objects_v2, **kw)
            yield from page.get("Contents", [])
            if not page.get("IsTruncated"):
                return
            token = page["NextContinuationToken"]

    def _job_objects(self, job_id: str) -> dict[str, int]:
        """rel path -> bytes of every object of one job."""
        base = self._key(job_id)
        return {o["Key"][len(base):]: o["Size"] for o in self._objects(base)}

    def _delete_keys(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[i:i + 1000]]
            self._call("delete stored files", self.client.delete_objects, Bucket=self.bucket,
                       Delete={"Objects": batch, "Quiet": True})

    def _upload(self, path: Path, key: str) -> None:
        # Multipart above s3transfer's threshold: the object still appears only once complete.
        self._call(f"store {path.name}", self.client.upload_file, Filename=str(path), Bucket=self.bucket, Key=key)

    def _put(self, key: str, body: bytes) -> None:
        self._call(f"store {key.rsplit('/', 1)[-1]}", self.client.put_object, Bucket=self.bucket, Key=key, Body=body)

    def _get(self, key: str) -> bytes:
        obj = self._call(f"read {key.rsplit('/', 1)[-1]}", self.client.get_object, Bucket=self.bucket, Key=key)
        return obj["Body"].read()

    # -- submission --------------------------------------------------------------------------
    def create(self, spec: JobSpec, staged: Path | None) -> None:
        try:
            if staged is not None:
                for path in sorted(staged.rglob("*")):
                    if path.is_file() and not path.is_symlink():
                        self._upload(path, self._key(spec.id, path.relative_to(staged).as_posix()))
            self._put(self._key(spec.id, SPEC_FILE), spec.to_json().encode())
        except BaseException:
            self.delete(spec.id)
            raise
        finally:
            if staged is not None:
                shutil.rmtree(staged, ignore_errors=True)

    def delete(self, job_id: str) -> None:
        """Best effort: what a failure leaves is a stray prefix, which ``sweep_unknown`` removes later."""
        try:
            self._delete_keys([o["Key"] for o in self._objects(self._key(job_id))])
        except StorageUnavailable as e:
            log.warning("could not delete the files of job %s: %s", job_id, e.message)

    # -- running -----------------------------------------------------------------------------
    def checkout(self, rec: JobRecord) -> Path | None:
        folder = self.scratch / rec.id
        shutil.rmtree(folder, ignore_errors=True)
        stored = self._job_objects(rec.id)
        if SPEC_FILE not in stored:
            return None
        inputs = [rel for rel in stored if rel == SPEC_FILE or rel.startswith(INPUT_DIR + "/")]
        if rec.attempts > 1:  # a re-run starts from its inputs only: an earlier attempt may have stored some outputs
            self._delete_keys([self._key(rec.id, rel) for rel in stored if rel not in inputs])
        folder.mkdir(parents=True)
        for rel in inputs:
            if not _safe_relative(rel):
                continue  # never written by us: a key must not steer a file out of the folder
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            self._call(f"read {rel}", self.client.download_file, Bucket=self.bucket, Key=self._key(rec.id, rel),
                       Filename=str(target))
        return folder

    def checkin(self, job_id: str, folder: Path) -> None:
        stored = self._job_objects(job_id)
        stored_inputs = [rel for rel in stored if rel.startswith(INPUT_DIR + "/")]
        # Identical files of the job share one inode (dedupe_job_files): each is stored once.
        holder = {_inode(folder / rel): rel for rel in stored_inputs if (folder / rel).is_file()}
        manifest: dict[str, dict] = {}
        artifacts = folder / ARTIFACTS_DIR
        for path in sorted(artifacts.iterdir()) if artifacts.is_dir() else []:
            if not path.is_file() or path.is_symlink() or not SAFE_NAME.fullmatch(path.name):
                continue
            rel = f"{ARTIFACTS_DIR}/{path.name}"
            key_rel = holder.setdefault(_inode(path), rel)
            if key_rel == rel:
                self._upload(path, self._key(job_id, rel))
            manifest[rel] = {"key": key_rel, "size": path.stat().st_size}
        # An upload the job consumed (an archive extracted into artifacts/), and anything an earlier
        # attempt stored that this one did not write, go.
        gone = [rel for rel in stored_inputs if not (folder / rel).is_file()]
        gone += [rel for rel in stored if rel.startswith(ARTIFACTS_DIR + "/") and rel not in manifest]
        self._delete_keys([self._key(job_id, rel) for rel in gone])
        self._put(self._key(job_id, MANIFEST_FILE), json.dumps({"files": manifest}, sort_keys=True).encode())
        report = stored_report(folder)
        if report is not None:  # last: from here on the job's files are complete
            self._put(self._key(job_id, report.name), report.read_bytes())
            self._delete_keys([self._key(job_id, PARTIAL_REPORT_FILE)])  # the report as it came is superseded

    def discard(self, job_id: str, folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        self._partials.pop(job_id, None)

    def store_partial(self, job_id: str, folder: Path) -> None:
        """The worker's partial report into the bucket, when it changed (the supervisor calls this as the
        job's progress comes in): a running job's report as it comes, with no shared folder."""
        path = stored_partial_report(folder)
        try:
            stamp = path.stat().st_mtime_ns if path is not None else None
            if stamp is None or self._partials.get(job_id) == stamp:
                return
            self._put(self._key(job_id, PARTIAL_REPORT_FILE), path.read_bytes())
        except (OSError, StorageUnavailable) as e:  # the report as it comes is a courtesy: the job goes on
            log.warning("partial report of job %s not stored: %s", job_id, e)
            return
        self._partials[job_id] = stamp

    def sweep_scratch(self, *, older_than: float | None = None) -> list[str]:
        """Scratch folders left by jobs this machine no longer runs (a worker killed mid-job)."""
        swept = []
        if not self.scratch.is_dir():
            return swept
        for entry in self.scratch.iterdir():
            if older_than is None or last_changed(entry) < older_than:
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
                swept.append(entry.name)
        return swept

    # -- reading -----------------------------------------------------------------------------
    def report_version(self, job_id: str, *, partial: bool = False) -> str | None:
        for name in (PARTIAL_REPORT_FILE,) if partial else (REPORT_FILE, LEGACY_REPORT_FILE):
            try:
                head = self._call("look up the report", self.client.head_object, Bucket=self.bucket,
                                  Key=self._key(job_id, name))
            except FileNotFoundError:
                continue
            return f"{name}:{head.get('ETag')}"
        return None

    def report_bytes(self, job_id: str, *, partial: bool = False) -> bytes:
        for name in (PARTIAL_REPORT_FILE,) if partial else (REPORT_FILE, LEGACY_REPORT_FILE):
            try:
                raw = self._get(self._key(job_id, name))
            except FileNotFoundError:
                continue
            return report_json(name, raw, where=f"of job {job_id}")
        raise FileNotFoundError(f"job {job_id} has no report")

    def _manifest(self, job_id: str) -> dict[str, dict]:
        try:
            raw = self._get(self._key(job_id, MANIFEST_FILE))
        except FileNotFoundError:
            return {}
        return json.loads(raw)["files"]

    def artifacts(self, job_id: str) -> dict[str, int]:
        out = {}
        for rel, entry in self._manifest(job_id).items():
            name = rel[len(ARTIFACTS_DIR) + 1:]
            if rel.startswith(ARTIFACTS_DIR + "/") and SAFE_NAME.fullmatch(name):
                out[name] = int(entry["size"])
        return dict(sorted(out.items()))

    def download(self, job_id: str, name: str, *, filename: str) -> Download | None:
        entry = self._manifest(job_id).get(f"{ARTIFACTS_DIR}/{name}") if SAFE_NAME.fullmatch(name) else None
        if entry is None:
            return None
        key, size = self._key(job_id, entry["key"]), int(entry["size"])
        if self.redirect:
            url = self._call("sign a download", self.client.generate_presigned_url, ClientMethod="get_object",
                             Params={"Bucket": self.bucket, "Key": key,
                                     "ResponseContentDisposition": f'attachment; filename="{filename}"'},
                             ExpiresIn=PRESIGNED_URL_EXPIRES_S)
            return Download(size=size, redirect=url)
        body = self._call(f"read {name}", self.client.get_object, Bucket=self.bucket, Key=key)["Body"]
        return Download(size=size, chunks=_chunks(body))

    def artifact_for_regeneration(self, job_id: str, artifact: str, scratch: Path) -> Path:
        model = f"{artifact}.onnx"
        scratch.mkdir(parents=True, exist_ok=True)
        for rel, entry in self._manifest(job_id).items():
            name = rel[len(ARTIFACTS_DIR) + 1:]
            if (rel.startswith(ARTIFACTS_DIR + "/") and SAFE_NAME.fullmatch(name)
                    and (name == model or name.startswith(model + "."))):  # + its external data
                self._call(f"read {name}", self.client.download_file, Bucket=self.bucket,
                           Key=self._key(job_id, entry["key"]), Filename=str(scratch / name))
        return scratch / model

    # -- lifecycle ---------------------------------------------------------------------------
    def _by_job(self) -> dict[str, list[dict]]:
        base = self.location.key(JOBS_PREFIX)
        out: dict[str, list[dict]] = {}
        for o in self._objects(base):
            job_id, _, rel = o["Key"][len(base):].partition("/")
            out.setdefault(job_id, []).append({**o, "rel": rel})
        return out

    def usage(self, statuses: dict[str, tuple[str, float | None]]) -> list[JobOnDisk]:
        out = []
        for job_id, objects in sorted(self._by_job().items()):
            status, finished_at = statuses.get(job_id, ("unknown", None))
            out.append(JobOnDisk(id=job_id, finished=status in ("succeeded", "failed"), finished_at=finished_at,
                                 input_bytes=sum(o["Size"] for o in objects if o["rel"].startswith(INPUT_DIR + "/")),
                                 bytes=sum(o["Size"] for o in objects)))
        return out

    def sweep_unknown(self, known: set[str], *, older_than: float | None = None) -> list[str]:
        swept = []
        for job_id, objects in self._by_job().items():
            newest = max(o["LastModified"].timestamp() for o in objects)
            if job_id in known or (older_than is not None and newest >= older_than):
                continue
            self._delete_keys([o["Key"] for o in objects])
            swept.append(job_id)
        return swept
