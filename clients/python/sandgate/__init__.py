"""Sandgate's Python client: a thread's sandbox through the gateway's HTTP API.

Standard library only (urllib for requests, http.client for streamed
exec). Every call is one HTTP request; a failure raises SandgateError
carrying the gateway's ``error`` envelope ({"code", "message"}) or the
sandbox's ({"success": false, "message", "code"}).

    from sandgate import Client
    sg = Client("http://127.0.0.1:8080", api_key="...")
    t = sg.thread("my-thread")
    print(t.exec("echo hi").output)
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, fields
from typing import Any, Dict, Iterator, List, Optional

__all__ = [
    "Client", "Thread", "SandgateError", "Sandbox", "ExecResult", "ExecEvent", "FileEntry",
    "Checkpoint", "Template", "TemplateList",
]


class SandgateError(Exception):
    """A refused or failed call: the HTTP status, the machine-readable code
    (the gateway's error.code, or the sandbox's code) and the message."""

    def __init__(self, status: int, code: str, message: str, body: Any = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body  # the decoded answer, or its text


def _typed(cls, data: Dict[str, Any]):
    """cls from the fields of data it names (a newer gateway may send more)."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class Sandbox:
    sandbox_id: str
    thread: str
    user: str
    backend: str
    state: str
    url: str = ""
    sandbox_url: str = ""
    created_at: str = ""
    template: Optional[str] = None
    outcome: Optional[str] = None
    frozen: bool = False
    metadata: Dict[str, str] = field(default_factory=dict)
    data: Optional[Dict[str, Any]] = None


@dataclass
class ExecResult:
    session_id: str
    command: str
    status: str  # completed, running, no_change_timeout, hard_timeout, terminated
    output: str = ""
    exit_code: Optional[int] = None
    console: Optional[List[Dict[str, Any]]] = None


@dataclass
class ExecEvent:
    """One event of a streamed exec: start, output (text) or result."""
    event: str
    data: Dict[str, Any]

    @property
    def text(self) -> str:
        return self.data.get("output", "") if self.event == "output" else ""


@dataclass
class FileEntry:
    name: str
    path: str
    is_directory: bool
    size: Optional[int] = None
    modified_time: Optional[str] = None
    permissions: Optional[str] = None
    extension: Optional[str] = None


@dataclass
class Checkpoint:
    id: str
    created_at: str
    size: int
    files: int
    linked: int = 0
    skipped: int = 0
    method: str = ""
    label: Optional[str] = None


@dataclass
class Template:
    name: str
    default: bool = False
    image: Optional[str] = None
    memory: Optional[int] = None
    max_memory: Optional[int] = None
    env_names: List[str] = field(default_factory=list)
    egress: Optional[str] = None
    prewarm: Optional[int] = None


@dataclass
class Preview:
    """A preview link: url (and path_url) open the port with no other
    credential until expires_at, so treat them as secrets."""
    id: str
    url: str
    path_url: str
    port: int
    expires_at: str


@dataclass
class TemplateList:
    templates: List[Template]
    default: Optional[str] = None


class Client:
    """A gateway: base URL and an API key or JWT (None: a gateway without
    authentication)."""

    def __init__(self, url: str, api_key: Optional[str] = None, timeout: float = 300.0):
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def thread(self, name: str) -> "Thread":
        return Thread(self, name)

    def templates(self) -> TemplateList:
        d = self.request("GET", "/api/templates")
        return TemplateList(templates=[_typed(Template, t) for t in d.get("templates", [])], default=d.get("default"))

    def _headers(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        h = {"Accept": "application/json"}
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        h.update(extra or {})
        return h

    def request(self, method: str, path: str, body: Any = None, query: Optional[Dict[str, str]] = None) -> Any:
        """One JSON call; the decoded answer (None for 204), or SandgateError."""
        url = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        headers = self._headers({"Content-Type": "application/json"} if data is not None else None)
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as res:
                raw = res.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raise _error(e.code, e.read()) from None


def _error(status: int, raw: bytes) -> SandgateError:
    """The exception for a failed answer: the gateway's {"error": {code,
    message}}, the sandbox's envelope, or the text of anything else."""
    try:
        body = json.loads(raw)
    except ValueError:
        text = raw.decode(errors="replace")
        return SandgateError(status, "http_%d" % status, text.strip() or "HTTP %d" % status, text)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        return SandgateError(status, err.get("code", ""), err.get("message", ""), body)
    if isinstance(body, dict) and "success" in body:
        return SandgateError(status, body.get("code") or "sandbox_error", body.get("message") or "", body)
    return SandgateError(status, "http_%d" % status, str(body), body)


def _data(status: int, envelope: Dict[str, Any]) -> Any:
    """The sandbox envelope's data; success false raises even on a 200."""
    if not envelope.get("success", False):
        raise _error(status, json.dumps(envelope).encode())
    return envelope.get("data")


class Thread:
    """One thread of the client's user: its sandbox, files and checkpoints."""

    def __init__(self, client: Client, name: str):
        self.client = client
        self.name = name
        self._base = "/threads/" + urllib.parse.quote(name, safe="")

    # Control plane.

    def create(self, template: Optional[str] = None, env: Optional[Dict[str, str]] = None,
               memory: Optional[int] = None, metadata: Optional[Dict[str, str]] = None) -> Sandbox:
        """Provision the thread's sandbox now (or get the one it has), made
        from template with env set in it; the options are stored with the
        thread. With no option at all, what is stored stays."""
        body = {k: v for k, v in (("template", template), ("env", env), ("memory", memory), ("metadata", metadata))
                if v is not None}
        return _typed(Sandbox, self.client.request("PUT", self._base + "/sandbox", body if body else None))

    def get(self) -> Sandbox:
        return _typed(Sandbox, self.client.request("GET", self._base + "/sandbox"))

    def destroy(self) -> None:
        """Destroy the sandbox now (the thread's files stay)."""
        self.client.request("DELETE", self._base + "/sandbox", query={"destroy": "true"})

    def release(self) -> None:
        """Give the sandbox back to the warm pool."""
        self.client.request("DELETE", self._base + "/sandbox")

    def freeze(self) -> bool:
        """Stop the sandbox's processes now; its next request thaws it.
        Takes the replicas' route cache time; a busy sandbox is a 409."""
        return bool(self.client.request("POST", self._base + "/sandbox/freeze").get("frozen"))

    def thaw(self) -> Sandbox:
        """Thaw a frozen sandbox: any request to it does; this one asks for
        its environment, then returns the record."""
        self.client.request("GET", self._base + "/v1/sandbox")
        return self.get()

    def fork(self, new_thread: str, checkpoint: Optional[str] = None) -> Sandbox:
        """A new thread of the same user whose workspace starts as this
        one's (or as checkpoint's), with its own sandbox."""
        body = {"thread": new_thread}
        if checkpoint:
            body["checkpoint"] = checkpoint
        return _typed(Sandbox, self.client.request("POST", self._base + "/fork", body))

    # Checkpoints.

    def checkpoint(self, label: Optional[str] = None) -> Checkpoint:
        body = {"label": label} if label else None
        return _typed(Checkpoint, self.client.request("POST", self._base + "/checkpoints", body))

    def checkpoints(self) -> List[Checkpoint]:
        d = self.client.request("GET", self._base + "/checkpoints")
        return [_typed(Checkpoint, c) for c in d.get("checkpoints", [])]

    def restore(self, checkpoint_id: str, force: bool = False) -> Checkpoint:
        path = self._base + "/checkpoints/" + urllib.parse.quote(checkpoint_id, safe="") + "/restore"
        d = self.client.request("POST", path, {"force": True} if force else None)
        return _typed(Checkpoint, d["restored"])

    # Preview links.

    def preview(self, port: int, ttl: Optional[str] = None) -> Preview:
        """A signed link to port inside the thread's sandbox (ttl: a Go
        duration such as "30m"; None: the gateway's default, 1h)."""
        body: Dict[str, Any] = {"port": port}
        if ttl:
            body["ttl"] = ttl
        return _typed(Preview, self.client.request("POST", self._base + "/previews", body))

    def previews(self) -> List[Preview]:
        d = self.client.request("GET", self._base + "/previews")
        return [_typed(Preview, p) for p in d.get("previews", [])]

    def revoke_preview(self, preview_id: str) -> None:
        self.client.request("DELETE", self._base + "/previews/" + urllib.parse.quote(preview_id, safe=""))

    # The sandbox API (/v1).

    def sandbox_call(self, path: str, body: Any = None, method: str = "POST") -> Any:
        """A call of the sandbox API (path under /v1, e.g. "file/read"): its data."""
        return _data(200, self.client.request(method, self._base + "/v1/" + path.lstrip("/"), body))

    def exec(self, command: str, exec_dir: Optional[str] = None, timeout: Optional[float] = None,
             session: Optional[str] = None) -> ExecResult:
        """Run command in the thread's default shell session (or session) and
        wait for it: its output (stdout and stderr) and exit code."""
        d = self.sandbox_call("shell/exec", _exec_body(command, exec_dir, timeout, session))
        return _typed(ExecResult, d)

    def exec_stream(self, command: str, exec_dir: Optional[str] = None, timeout: Optional[float] = None,
                    session: Optional[str] = None) -> Iterator[ExecEvent]:
        """Run command and yield its events as they come: start, output (as
        the command writes) and result (whose data is the exec's envelope)."""
        u = urllib.parse.urlsplit(self.client.url)
        conn_cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        conn = conn_cls(u.hostname, u.port, timeout=self.client.timeout)
        try:
            body = json.dumps(_exec_body(command, exec_dir, timeout, session))
            headers = self.client._headers({"Content-Type": "application/json", "Accept": "text/event-stream"})
            conn.request("POST", u.path + self._base + "/v1/shell/exec", body=body, headers=headers)
            res = conn.getresponse()
            if res.status != 200:
                raise _error(res.status, res.read())
            event, data = "message", []
            for raw in res:
                line = raw.decode().rstrip("\r\n")
                if line == "":
                    if data:
                        yield ExecEvent(event, json.loads("\n".join(data)))
                    event, data = "message", []
                elif line.startswith(":"):
                    continue  # keep-alive
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    value = line[5:]
                    data.append(value[1:] if value.startswith(" ") else value)
        finally:
            conn.close()

    def write_file(self, path: str, content: str, append: bool = False) -> int:
        """Write (or append) text to path in the sandbox; the bytes written."""
        body = {"file": path, "content": content}
        if append:
            body["append"] = True
        return self.sandbox_call("file/write", body).get("bytes_written") or 0

    def read_file(self, path: str) -> str:
        return self.sandbox_call("file/read", {"file": path})["content"]

    def list_files(self, path: str, recursive: bool = False) -> List[FileEntry]:
        body: Dict[str, Any] = {"path": path}
        if recursive:
            body["recursive"] = True
        return [_typed(FileEntry, f) for f in self.sandbox_call("file/list", body).get("files") or []]


def _exec_body(command, exec_dir, timeout, session) -> Dict[str, Any]:
    body: Dict[str, Any] = {"command": command}
    if exec_dir:
        body["exec_dir"] = exec_dir
    if timeout is not None:
        body["timeout"] = timeout
    if session:
        body["id"] = session
    return body
