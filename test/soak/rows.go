package main

// row is one failure the service is built against: what happens, the
// mechanism, and the tests that would fail if it broke. The report renders
// these rows; edit them here, not in docs/RELIABILITY.md.
type row struct {
	failure, happens, mechanism string
	tests                       []testRef
	note                        string // shown in the test column after the tests
}

type testRef struct{ pkg, name string }

const (
	e2e        = "./test/e2e"
	poolPkg    = "./internal/pool"
	statedbPkg = "./internal/statedb"
	procPkg    = "./internal/backend/process"
	ckptPkg    = "./internal/checkpoint"
)

var rows = []row{
	{
		failure:   "Many first requests for one thread, on many replicas",
		happens:   "exactly one sandbox",
		mechanism: "single-flight per replica; `p{sid}:lock` (bsm/redislock, refreshed while held) across replicas; re-check of the record and `Discover` under the lock before `Create`",
		tests:     []testRef{{e2e, "TestReplicasCreateExactlyOneSandboxPerThread"}, {poolPkg, "TestConcurrentAcquiresCreateOncePerThread"}},
		note:      "(3 replicas, 300 requests, 30 threads → 30 sandboxes, 0 errors)",
	},
	{
		failure:   "A replica is `kill -9`ed while it creates",
		happens:   "no duplicate, no orphan",
		mechanism: "the lock expires after `lock_ttl`; the process backend writes its state file before waiting for readiness, so the next replica's `Discover` adopts the half-made sandbox",
		tests:     []testRef{{e2e, "TestReplicaKilledMidCreateLeavesNoDuplicateOrOrphan"}},
		note:      "; soak fault “replica kill -9 + restart”",
	},
	{
		failure:   "Two replicas reap the same expired sandbox",
		happens:   "destroyed once",
		mechanism: "each bucket reaped by the replica holding its lease; per-sandbox lock, then `scriptTake` (Lua) takes it out of its bucket's index only if still expired, and `scriptRecClaim` claims the record only in that index's state",
		tests:     []testRef{{poolPkg, "TestThreeReapersDestroyEachExactlyOnce"}},
		note:      "(3 replicas, 200 expired sandboxes)",
	},
	{
		failure:   "A 20-minute command on an idle-timeout of 10 minutes",
		happens:   "not reaped",
		mechanism: "a request in flight keeps its route touched; each replica flushes touches every `touch_interval`; the reaper also skips sandboxes with a request in flight on its own replica",
		tests:     []testRef{{poolPkg, "TestInFlightIsNeverReaped"}, {e2e, "TestIdleSandboxesAreReapedButNotBusyOnes"}},
	},
	{
		failure:   "A warm sandbox dies while parked",
		happens:   "never handed out",
		mechanism: "liveness check before reclaim; the dead record is dropped (incarnation-guarded) and a new sandbox created",
		tests:     []testRef{{poolPkg, "TestWarmReclaimAndDeadWarmNeverReturned"}},
	},
	{
		failure:   "A sandbox is killed behind the gateway's back",
		happens:   "next request recreates it transparently, files intact",
		mechanism: "the proxy checks a pooled connection for a close from the sandbox before reuse, so a dead sandbox shows as a refused dial; dial failures re-acquire (verifying liveness) and retry",
		tests:     []testRef{{e2e, "TestKilledSandboxIsRecreatedWithFiles"}, {"./internal/proxy", "TestDeadUpstreamIsADialErrorAndRetried"}},
		note:      "; soak fault “sandbox process kill -9”",
	},
	{
		failure:   "A sandbox is killed mid-request",
		happens:   "502 `sandbox_connection_lost`; the next call recreates",
		mechanism: "a broken connection after the request was sent is never replayed (the sandbox may have acted on it)",
		tests:     []testRef{{e2e, "TestSandboxKilledMidRequestIs502ThenRecreated"}},
	},
	{
		failure:   "A sandbox is destroyed while an upload streams into it",
		happens:   "502 `sandbox_connection_lost`, never 500; the gateway serves on and the thread's next call gets a new sandbox",
		mechanism: "a request body whose write to the sandbox breaks is the sandbox's failure (`proxy.ExchangeError`); the transport's own error type hides the broken connection from the error table",
		tests:     []testRef{{e2e, "TestSandboxDestroyedMidUploadIs502"}, {"./internal/proxy", "TestBrokenExchangesAreClassified"}},
	},
	{
		failure:   "A client's request body is malformed (chunked framing with bare line feeds, truncated)",
		happens:   "400 `bad_request`, a client's fault (not logged as a gateway failure); the gateway serves on",
		mechanism: "the proxy's body reader keeps the client's read error (`proxy.BodyReadError`), which the error table checks before the broken-connection row",
		tests:     []testRef{{e2e, "TestChunkedBodyWithBareLineFeedsIs400"}, {"./internal/router", "TestStatusTable"}},
	},
	{
		failure:   "A sandbox answers 101 Switching Protocols to a request that asked for no upgrade, or for another protocol",
		happens:   "502 `sandbox_bad_response`; nothing is relayed and the gateway serves on",
		mechanism: "the proxy checks a 101 against the request's `Upgrade` before relaying it (`proxy.BadResponseError`)",
		tests:     []testRef{{"./internal/proxy", "TestBrokenExchangesAreClassified"}},
	},
	{
		failure:   "A sandbox answers 10 MB of response headers",
		happens:   "502 `sandbox_headers_too_large` after 64 KiB; the gateway's RSS grows under 1 MB for five such answers (it grew 37 MB for one before the bound) and it serves on",
		mechanism: "the sandbox transport counts the response head as it reads it (`proxy.DefaultMaxResponseHeaderBytes`) and drops the connection past the bound",
		tests:     []testRef{{e2e, "TestHugeSandboxHeadersCostTheGatewayNoMemory"}},
	},
	{
		failure:   "The disk fills during a file write or replace",
		happens:   "507; the old content is byte-identical and no temp file is left",
		mechanism: "writes and replaces go to a temp file in the same directory, fsync, then rename over the target (mode kept); any error removes the temp file",
		tests:     []testRef{{"./internal/sandbox", "TestFullDiskKeepsOldContent"}, {"./internal/sandbox", "TestAbortedUploadLeavesNoTempFile"}},
	},
	{
		failure:   "Two clients replace in one file at once",
		happens:   "each answer is applied or 409 `conflict`; the file holds exactly the applied edits",
		mechanism: "read-modify-write edits hold a per-path edit lock and check the file did not change between read and rename; the MCP `str_replace` goes through the same edit",
		tests:     []testRef{{"./internal/sandbox", "TestConcurrentReplacesNeverLoseAnEdit"}, {"./internal/mcp", "TestConcurrentStrReplaceLosesNoEdit"}},
		note:      "(20 rounds of two concurrent replaces; before: 15 of 20 lost an edit)",
	},
	{
		failure:   "One user creates sandboxes until the fleet is full",
		happens:   "429 `user_quota` + `Retry-After` past `max_sandboxes_per_user` / `max_creates_per_user`, or past its fair share of a full hard cap; other users still get theirs; admins exempt",
		mechanism: "each user's quota set (`p{u:user}:sbx`: held sandboxes and reservations with deadlines) is checked and reserved in one script, then the fleet's count; the create rate is a per-user GCRA in Redis",
		tests:     []testRef{{e2e, "TestPerUserQuotaUnderHardCap"}, {poolPkg, "TestUserQuota"}, {poolPkg, "TestFairShareRefusesOverShareUser"}, {e2e, "TestPerUserLimits"}, {statedbPkg, "TestCreateRateIsFleetWideGCRA"}},
		note:      "(3 replicas, hard cap 10, 5 per user)",
	},
	{
		failure:   "200 clients send request bodies slowly, then stall",
		happens:   "cut with 408 `body_timeout` after `body_idle_timeout`; goroutines and file descriptors back to baseline; the sandboxes are reaped on time",
		mechanism: "a read deadline on the client connection, pushed forward on every body read; the in-flight mark is released when the request ends",
		tests:     []testRef{{e2e, "TestStalledBodiesAreCutAndTheSandboxReaped"}},
	},
	{
		failure:   "A bug panics in a handler or a background pass (reaper, reconciler, touch flush, egress keeper)",
		happens:   "a handler: JSON 500 `internal`, no stack to the client; a pass: the loop goes on. Either is logged once with its stack (and the trace id when tracing is on)",
		mechanism: "the router's recover middleware and the loops' recover log `runtime/debug.Stack()`; `http.ErrAbortHandler` (a stream aborted on purpose) is re-raised",
		tests:     []testRef{{"./internal/router", "TestPanicIsLoggedOnceWithItsStack"}, {poolPkg, "TestEveryLogsAPanicWithItsStackAndGoesOn"}},
	},
	{
		failure:   "Redis is down",
		happens:   "503 `state_unavailable` + `Retry-After`; `/readyz` fails; cached threads keep working for `cache_ttl`",
		mechanism: "every Redis error maps to `ErrState`",
		tests:     []testRef{{e2e, "TestRedisDownAnswers503AndRecovers"}, {poolPkg, "TestCachedAcquireNeedsNoRedis"}},
		note:      "; soak fault “Redis crash + empty restart”",
	},
	{
		failure:   "Redis restarts empty, or is flushed",
		happens:   "no sandbox lost or duplicated",
		mechanism: "acquire runs `Discover` under the lock and adopts the running sandbox; with no traffic the reconciler adopts it into the warm pool after `reconcile_grace`",
		tests:     []testRef{{e2e, "TestRedisFlushThenTrafficKeepsEverySandbox"}, {e2e, "TestReconcilerRestoresRecordsAfterRedisLoss"}, {poolPkg, "TestRedisFlushLosesNoSandbox"}},
		note:      "; soak faults “Redis crash + empty restart”, “Redis FLUSHALL”",
	},
	{
		failure:   "A record points at a sandbox that is gone",
		happens:   "record dropped",
		mechanism: "reconciler confirms with `Alive` before dropping",
		tests:     []testRef{{poolPkg, "TestReconcilerAdoptsAndDrops"}},
	},
	{
		failure:   "A destroy is interrupted (replica died)",
		happens:   "finished later",
		mechanism: "the record stays `destroying`; the next acquire (under the lock) or the reconciler finishes it",
		note:      "`provision` / `Reconciler.settle`; no test of its own yet (the soak's replica kills land on destroys only by chance)",
	},
	{
		failure:   "The pool is full",
		happens:   "soft: least recently released warm sandbox evicted, else created beyond the cap with a warning; hard: 503 `capacity` + `Retry-After`",
		mechanism: "the fleet's script (`{fleet}` slot) counts every bucket's reported active + warm, the pre-started sandboxes and the reservations; reservations of dead replicas expire",
		tests:     []testRef{{poolPkg, "TestSoftCapEvictsLeastRecentlyReleased"}, {poolPkg, "TestHardCap"}, {e2e, "TestHardCapAnswers503"}, {statedbPkg, "TestReserve"}},
	},
	{
		failure:   "The state outgrows one Redis: a Redis Cluster of 3 masters",
		happens:   "the keys spread over every master (33.1 / 33.6 / 33.4 % of 2,262 keys after 1,000 threads; layout 1: 0 / 100 / 0 %); still exactly one sandbox per thread, no duplicate or orphan after a kill -9 mid-create, each idle sandbox reaped once",
		mechanism: "key layout 2: a sandbox's keys under its own hash tag, the indexes in N buckets whose tags sit at evenly spaced slots, every script in one slot",
		tests: []testRef{{e2e, "TestClusterSpreadsThousandThreadsKeysOverEveryNode"}, {e2e, "TestClusterReplicasCreateExactlyOneSandboxPerThread"},
			{e2e, "TestClusterReplicaKilledMidCreateLeavesNoDuplicateOrOrphan"}, {e2e, "TestClusterReapsEachIdleSandboxExactlyOnce"}, {statedbPkg, "TestKeysSpreadOverSlots"}},
	},
	{
		failure:   "A Redis Cluster master is killed, paused past the node timeout or partitioned away, or a slot range migrates, under traffic",
		happens:   "reads and creates go on or answer 503 `state_unavailable`, and every read is served again within a second of the replica's promotion (was: 503 for over a minute after a failover); every acknowledged file stays readable, no thread has two sandboxes, no orphan after the reconciler's pass",
		mechanism: "the Cluster client reloads its slot map at the first failed dial or timeout, CLUSTERDOWN, TRYAGAIN, MASTERDOWN, READONLY or LOADING, and at least every 5 s (go-redis alone: only on MOVED/ASK, else every 60 s); MOVED/ASK followed by go-redis; a create cut short between sandbox and record is adopted by the reconciler after `reconcile_grace`",
		tests:     []testRef{{e2e, "TestClusterFaults"}, {statedbPkg, "TestClusterClientFollowsFailover"}},
		note:      "(3 masters + 3 replicas, node timeout 2 s, 2 gateways, 30 threads; see “Redis's own guarantees” above); soak `-redis cluster`: every Cluster fault in the rotation, under the full load",
	},
	{
		failure:   "A replica dies between the steps of a change that spans Redis slots",
		happens:   "the reconciler of the bucket repairs it: no sandbox reaped early, none counted twice or lost by the cap or its user",
		mechanism: "a fixed order (the bucket registers before the record is written and forgets after it is deleted; the record decides, the indexes follow; the limits last, idempotent); `Store.Inconsistent` then `Store.Repair` under the sandbox's lock, and `SyncCounts`",
		tests:     []testRef{{statedbPkg, "TestCrashBetweenStepsIsRepaired"}},
		note:      "(each of 11 step boundaries, on redis-server and miniredis)",
	},
	{
		failure:   "A replica dies: its share of reaping and reconciling",
		happens:   "taken over by the others once its bucket leases expire (`bucket_lease_ttl`)",
		mechanism: "rendezvous hashing of the buckets over the replicas that beat within a TTL, with a `SET … PX` lease per bucket",
		tests:     []testRef{{poolPkg, "TestBucketLeasesSplitTheWorkAndMoveOnDeath"}},
		note:      "(3 replicas: no bucket held twice or left, 60 idle sandboxes reaped once each)",
	},
	{
		failure:   "A deployment upgrades from the single-slot layout (layout 1)",
		happens:   "the first replica to start migrates the state once before it reports ready; records, index scores, aliases, capabilities and egress policies carry over",
		mechanism: "a layout stamp (`p{layout}`), a migration lock, idempotent writes with the stamp last; a stamp with another bucket count is refused",
		tests:     []testRef{{statedbPkg, "TestMigrateFromLayout1"}, {e2e, "TestGatewayMigratesLayout1StateAtStart"}},
		note:      "(from a state written by layout 1's code)",
	},
	{
		failure:   "An idle sandbox is frozen (`freeze_after`) while replicas may still route to it",
		happens:   "no request waits on a frozen sandbox: the next one, on any replica, thaws it first (outcome `thawed`)",
		mechanism: "the freeze mark is written only to a record not routed to since the cutoff (`seen_ms`, read in the same script), `freeze_after` > `cache_ttl` + `touch_interval`; `Activate` refuses a marked record; the activity score is checked again after the mark; the thaw runs under the sandbox's lock",
		tests:     []testRef{{e2e, "TestIdleSandboxFreezesAndThawsOnAnotherReplica"}, {statedbPkg, "TestFreezeMark"}, {poolPkg, "TestFreezerFreezesIdleAndThawsOnAcquire"}},
	},
	{
		failure:   "A sandbox runs a command, or holds a WebSocket, past `freeze_after`",
		happens:   "not frozen, and touched, so not reaped as idle either; frozen once quiet for `freeze_after`",
		mechanism: "the freezer asks the sandbox (`GET /v1/sandgate/activity`: commands, requests in flight; no answer counts as busy); a request in flight is touched every `touch_interval`",
		tests:     []testRef{{e2e, "TestBusySandboxIsNotFrozen"}, {poolPkg, "TestFreezerFreezesIdleAndThawsOnAcquire"}},
	},
	{
		failure:   "An async command (exec with `async_mode`) runs past `idle_timeout` with no request in flight",
		happens:   "not reaped while it runs; reaped `idle_timeout` after it ends",
		mechanism: "the reaper asks an active sandbox (`GET /v1/sandgate/activity`) before it claims it, and spares and renews one running a command",
		tests:     []testRef{{e2e, "TestAsyncCommandOutlivesIdleTimeout"}, {poolPkg, "TestReaperSparesRunningCommand"}},
	},
	{
		failure:   "A replica dies while it holds a sandbox stopped (a freeze, a checkpoint, a restore)",
		happens:   "the next request thaws it once the lock lapses",
		mechanism: "the record is marked frozen before the processes stop, and cleared after they run again",
		tests:     []testRef{{poolPkg, "TestHold"}, {statedbPkg, "TestFreezeMark"}},
	},
	{
		failure:   "A frozen sandbox's record is lost (Redis flushed)",
		happens:   "adopted running, never handed out frozen",
		mechanism: "the reconciler resumes what it adopts; the process and docker backends resume a paused sandbox their `Discover` finds",
		tests:     []testRef{{poolPkg, "TestReconcilerResumesAdoptedFrozenSandbox"}, {procPkg, "TestPauseResume"}},
	},
	{
		failure:   "A checkpoint restore meets a running command, a write in flight, or a failure half way",
		happens:   "409 `sandbox_busy` and nothing changed; with `force` the files are swapped under the frozen command; a failed swap is rolled back; the sandbox never sees a mixed tree",
		mechanism: "the checkpoint's tree is staged beside the workspace first, then swapped by renames with the sandbox frozen, journaled on disk",
		tests:     []testRef{{e2e, "TestCheckpointRestoreAndFork"}, {ckptPkg, "TestSwapRollback"}, {ckptPkg, "TestStagingFailureLeavesWorkspace"}},
	},
	{
		failure:   "The gateway is killed (SIGKILL) in the middle of a checkpoint restore, at any point: staging, the swap's renames, the cleanup",
		happens:   "before the next gateway serves anything, the workspace is exactly the old tree (killed before the swap's last step) or exactly the checkpoint's (after it), every entry's bytes, mode, times and owner; no `.ckpt-*` dir or journal left; the thread restores again normally",
		mechanism: "the journal is on disk in the thread's checkpoint root, written whole and fsynced with its dir before the first rename, naming every step; a journal whose flock is free is settled (an unfinished swap rolled back, each undo detectable, so a kill while settling is settled again) by `Threads.Settle` at the gateway's start and by any open of the thread's store; a corrupt journal is kept and never acted on",
		tests:     []testRef{{ckptPkg, "TestRestoreCrash"}, {ckptPkg, "TestSettleCrash"}, {ckptPkg, "TestCorruptJournal"}, {ckptPkg, "TestLiveJournalLeftAlone"}},
		note:      "(a child process killed at each of the 45 points of a restore, then at each of the 33 of settling one)",
	},
	{
		failure:   "A create takes longer than the client waits",
		happens:   "503 `provisioning` + `Retry-After`; the create goes on",
		mechanism: "the attempt runs detached from the request (single-flight), bounded by `create_timeout`",
		tests:     []testRef{{e2e, "TestProvisioningPastItsBudgetAnswers503ThenServes"}},
	},
	{
		failure:   "A create fails",
		happens:   "502 `sandbox_start_failed`; capacity given back",
		mechanism: "the reservation is removed",
		tests:     []testRef{{poolPkg, "TestCreateFailureGivesCapacityBack"}},
	},
	{
		failure:   "The sandbox binary cannot start (exits at once, never answers, no longer executable, deleted)",
		happens:   "502 `sandbox_start_failed`, no host path in the body; nothing leaked: no record, no capacity reservation, no lock, no process (the never-answering one's whole tree is killed at `create_timeout`); the thread works once the binary is repaired. Not executable at start: the gateway refuses to start and names it",
		mechanism: "the process backend kills the child's group and removes its state on a failed create; the pool removes the reservation; the binary is checked at start",
		tests:     []testRef{{e2e, "TestSandboxBinaryThatCannotStartLeaksNothing"}, {e2e, "TestUnexecutableSandboxBinaryRefusedAtStart"}, {procPkg, "TestCreateFailsFastWhenServerExits"}, {procPkg, "TestCreateHonoursReadyTimeout"}},
	},
	{
		failure:   "The Docker engine is down (socket missing, connection refused) or hung (accepts, never answers)",
		happens:   "503 `backend_unavailable` (or `provisioning` while a hung create runs) + `Retry-After`, no address or host path in the body; `/readyz` fails; nothing leaked once `create_timeout` passes; repaired, the thread gets exactly one container; `backend: auto` falls back to `process`",
		mechanism: "engine connection errors map to `backend.ErrUnavailable`; a create is bounded by `create_timeout` and gives its lock and reservation back",
		tests:     []testRef{{e2e, "TestDockerEngineUnreachableOrHungIs503AndLeaksNothing"}, {e2e, "TestDockerEngineDownIs503AndAutoFallsBack"}},
	},
	{
		failure:   "The thread's data directory cannot be made: a file in its place, permission denied (immutable, binds root), read-only filesystem, disk full",
		happens:   "507 `storage_unavailable` (`insufficient_storage` for a full disk), no `Retry-After`, no host path in the body; nothing leaked; the thread works once repaired",
		mechanism: "the backends that bind host dirs (process, docker, applecontainer) make them first in `Create` (`backend.EnsureHostDirs`); its `backend.ErrHostDirs` maps to `pool.ErrStorage`, before any sandbox starts. Backends without host dirs (kubernetes, remote) never touch the gateway's disk",
		tests:     []testRef{{e2e, "TestDataDirErrorsAre507WithoutHostPath"}},
		note:      "; soak probes below",
	},
	{
		failure:   "The disk fills under a running sandbox",
		happens:   "its writes answer 507 naming only the virtual path; shell writes fail with a non-zero exit code; reads and the sandbox itself carry on; once space is freed the same incarnation writes again",
		mechanism: "the sandbox server maps `ENOSPC`/`EDQUOT` to 507 with the virtual path",
		tests:     []testRef{{e2e, "TestDiskFullUnderARunningSandbox"}},
	},
	{
		failure:   "The backend's state dir (`{data_dir}/sandboxes`) is full",
		happens:   "502 `sandbox_start_failed` (not 507: the process backend's `ENOSPC` is not told apart from a failed start), no host path; nothing leaked; the thread's files are intact once space is freed",
		mechanism: "the failed create removes its reservation and state",
		tests:     []testRef{{e2e, "TestFullStateDirIsAClearError"}},
	},
	{
		failure:   "The gateway shuts down",
		happens:   "in-flight requests finish; sandboxes keep running",
		mechanism: "`/readyz` fails first, `http.Server.Shutdown`, upgraded connections closed last, a final touch flush",
		tests:     []testRef{{e2e, "TestShutdownDrainsAndLeavesSandboxes"}},
	},
	{
		failure:   "A recycled pid",
		happens:   "never taken for the sandbox",
		mechanism: "process incarnation = pid + start time from `/proc/<pid>/stat`",
		tests:     []testRef{{procPkg, "TestRecycledPidIsNeverKilled"}, {procPkg, "TestParseIncarnation"}},
	},
	{
		failure:   "A browser page on another site calls the gateway or a sandbox on loopback",
		happens:   "403",
		mechanism: "`Origin` / `Sec-Fetch-Site` checks; sandbox JSON endpoints require `application/json`",
		tests:     []testRef{{"./internal/router", "TestRequestsMapToStatuses"}, {"./internal/sandbox", "TestCrossSiteRequestsRefused"}, {"./internal/sandbox", "TestJSONEndpointsRefuseOtherContentTypes"}},
		note:      "; soak probes below",
	},
	{
		failure:   "Bad thread or sandbox ids",
		happens:   "400 before any I/O (even with Redis down); no sandbox made",
		mechanism: "`identity.ValidThread` and the sandbox id check run first in every handler",
		tests:     []testRef{{e2e, "TestBadThreadIDsRejectedBeforeIO"}},
		note:      "; soak probes below",
	},
}
