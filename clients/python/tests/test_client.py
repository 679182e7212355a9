"""The client against a real gateway: SANDGATE_URL and SANDGATE_KEY (a
threads key), set by client_test.go, which starts the gateway."""

import os
import time
import unittest
import urllib.error
import urllib.request
import uuid

from sandgate import Client, ExecResult, FileEntry, Preview, SandgateError, Template

WS = "/mnt/user-data/workspace"


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.sg = Client(os.environ["SANDGATE_URL"], api_key=os.environ["SANDGATE_KEY"])
        self.threads = []

    def tearDown(self):
        for t in self.threads:
            try:
                t.destroy()
            except SandgateError as e:
                if e.status != 404:
                    raise

    def thread(self):
        t = self.sg.thread("py-" + uuid.uuid4().hex[:12])
        self.threads.append(t)
        return t

    def test_create_with_env_exec_and_destroy(self):
        t = self.thread()
        sb = t.create(env={"GREETING": "hello"}, metadata={"from": "python"})
        self.assertEqual(sb.thread, t.name)
        self.assertEqual(sb.state, "active")
        self.assertRegex(sb.sandbox_id, "^[0-9a-f]{16}$")
        r = t.exec("echo $GREETING from $((6*7))")
        self.assertIsInstance(r, ExecResult)
        self.assertEqual((r.status, r.exit_code, r.output), ("completed", 0, "hello from 42\n"))
        self.assertEqual(t.exec("exit 3").exit_code, 3)
        self.assertEqual(t.get().metadata, {"from": "python"})
        t.destroy()
        with self.assertRaises(SandgateError) as cm:
            t.get()
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))

    def test_exec_stream(self):
        t = self.thread()
        events = list(t.exec_stream("echo one; sleep 0.3; echo two"))
        kinds = [e.event for e in events]
        self.assertEqual(kinds[0], "start")
        self.assertEqual(kinds[-1], "result")
        self.assertIn("output", kinds)
        self.assertEqual("".join(e.text for e in events), "one\ntwo\n")
        result = events[-1].data
        self.assertTrue(result["success"])
        self.assertEqual(result["data"]["exit_code"], 0)

    def test_files(self):
        t = self.thread()
        self.assertEqual(t.write_file(WS + "/a.txt", "alpha\n"), 6)
        t.write_file(WS + "/a.txt", "beta\n", append=True)
        self.assertEqual(t.read_file(WS + "/a.txt"), "alpha\nbeta\n")
        t.exec("mkdir -p " + WS + "/sub")
        entries = {e.name: e for e in t.list_files(WS)}
        self.assertIsInstance(entries["a.txt"], FileEntry)
        self.assertFalse(entries["a.txt"].is_directory)
        self.assertTrue(entries["sub"].is_directory)
        with self.assertRaises(SandgateError) as cm:  # the sandbox's envelope
            t.read_file(WS + "/missing.txt")
        self.assertGreaterEqual(cm.exception.status, 400)
        self.assertIn("missing.txt", cm.exception.message)
        self.assertNotIn("success", cm.exception.code)

    def test_checkpoints_restore_and_fork(self):
        t = self.thread()
        t.write_file(WS + "/v.txt", "one\n")
        ck = t.checkpoint(label="first")
        self.assertTrue(ck.id.startswith("ck-"))
        self.assertEqual(ck.label, "first")
        self.assertGreaterEqual(ck.files, 1)
        t.write_file(WS + "/v.txt", "two\n")
        self.assertIn(ck.id, [c.id for c in t.checkpoints()])
        self.assertEqual(t.restore(ck.id).id, ck.id)
        self.assertEqual(t.read_file(WS + "/v.txt"), "one\n")

        child = self.sg.thread("py-fork-" + uuid.uuid4().hex[:8])
        self.threads.append(child)
        sb = t.fork(child.name)
        self.assertEqual(sb.thread, child.name)
        self.assertEqual(child.read_file(WS + "/v.txt"), "one\n")

        with self.assertRaises(SandgateError) as cm:
            t.restore("ck-0000000000000-000000")
        self.assertEqual(cm.exception.status, 404)
        self.assertEqual(cm.exception.body["error"]["code"], cm.exception.code)

    def test_freeze_and_thaw(self):
        t = self.thread()
        t.create()
        deadline = time.time() + 60
        while True:  # a request just served can keep it busy a moment
            try:
                self.assertTrue(t.freeze())
                break
            except SandgateError as e:
                if e.code != "sandbox_busy" or time.time() > deadline:
                    raise
                time.sleep(1)
        self.assertTrue(t.get().frozen)
        self.assertFalse(t.thaw().frozen)
        self.assertEqual(t.exec("echo awake").output, "awake\n")

    def test_templates_and_create_from_one(self):
        # client_test.go's gateway has templates plain (the default) and marked.
        tl = self.sg.templates()
        self.assertEqual(tl.default, "plain")
        by_name = {x.name: x for x in tl.templates}
        self.assertIsInstance(by_name["marked"], Template)
        self.assertEqual(by_name["marked"].env_names, ["TEMPLATE_MARK"])
        self.assertEqual([x.name for x in tl.templates if x.default], ["plain"])
        t = self.thread()
        self.assertEqual(t.create(template="marked").template, "marked")
        self.assertEqual(t.exec("echo $TEMPLATE_MARK").output, "marked-template\n")

    def test_preview_link_opens_without_a_key_until_revoked(self):
        t = self.thread()
        t.write_file(WS + "/site/index.html", "<p>from the sandbox</p>\n")
        # A server on the sandbox's loopback, detached from the exec.
        t.exec("cd " + WS + "/site && (setsid python3 -m http.server 3000 --bind 127.0.0.1 >/dev/null 2>&1 &)")
        link = t.preview(3000, ttl="10m")
        self.assertIsInstance(link, Preview)
        self.assertEqual(link.port, 3000)
        self.assertEqual([p.id for p in t.previews()], [link.id])
        # No credential: the link is the credential (no proxy for loopback).
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.time() + 30
        while True:  # the server may still be starting
            try:
                with opener.open(link.url, timeout=10) as r:
                    self.assertEqual(r.read().decode(), "<p>from the sandbox</p>\n")
                break
            except urllib.error.HTTPError as e:
                if e.code != 502 or time.time() > deadline:
                    raise
                time.sleep(0.2)
        t.revoke_preview(link.id)
        self.assertEqual(t.previews(), [])
        deadline = time.time() + 5
        while True:  # revocation reaches every replica within a second
            try:
                opener.open(link.url, timeout=10).close()
            except urllib.error.HTTPError as e:
                self.assertEqual(e.code, 404)
                break
            self.assertLess(time.time(), deadline, "a revoked link still opens")
            time.sleep(0.1)

    def test_bad_key_is_unauthorized(self):
        bad = Client(os.environ["SANDGATE_URL"], api_key="not-a-key")
        with self.assertRaises(SandgateError) as cm:
            bad.thread("x").get()
        self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthorized"))


if __name__ == "__main__":
    unittest.main()
