"""The LangGraph API workload, measured through LangGraph's Python client
(`langgraph-sdk`), the client's own cost included, as a user sees it.

Against a server that serves the `bench_server` graphs at URL (argv[1]):
a one-node run with `runs.wait` on a new thread (created before the clock
starts), sequentially and with 16 concurrent clients; a thread created
and a one-node run on it, both timed, sequentially and by 16 asyncio tasks
sharing one client; a three-node run; a pause with an interrupt and a
resume with `Command(resume=…)`; the time to the first `updates` event of
a streamed three-node run; `threads.search` of 25; one-node runs with an
`Idempotency-Key` beside runs without one, and the same request sent again
(a replay). With $BENCH_JWT_SECRET_FILE (the server takes JWTs signed
with that secret), the client signs in as an admin, and one-node runs of
an admin and of a user (role `user`, ownership applied) are measured
interleaved. Prints one JSON object (milliseconds, runs per second). Run
by scripts/bench-langgraph-api.
"""

import asyncio
import base64
import hashlib
import hmac
import json
import os
import statistics
import sys
import time

from langgraph_sdk import get_client
from langgraph_sdk.schema import Command

URL = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 200
SECRET_FILE = os.environ.get("BENCH_JWT_SECRET_FILE")


def token(sub, roles):
    """An HS256 JWT of `sub` with `roles`, signed with the server's secret
    (None when the server takes no JWTs)."""
    if not SECRET_FILE:
        return None
    with open(SECRET_FILE, "rb") as file:
        secret = file.read().strip()
    def b64(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    claims = {"sub": sub, "roles": roles, "tenant": "bench", "exp": int(time.time()) + 3600}
    signed = b64(b'{"alg":"HS256","typ":"JWT"}') + "." + b64(json.dumps(claims).encode())
    mac = hmac.new(secret, signed.encode(), hashlib.sha256).digest()
    return signed + "." + b64(mac)


ADMIN = token("root", ["admin"])


def summary(samples):
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3), "p99_ms": round(p99 * 1000, 3)}


async def timed(coroutine):
    started = time.perf_counter()
    result = await coroutine
    return time.perf_counter() - started, result


async def one_node(client, thread):
    return await client.runs.wait(thread, "echo", input={"text": "x"})


async def create_and_run(client):
    thread = (await client.threads.create())["thread_id"]
    return await one_node(client, thread)


async def threads(client, count):
    return [(await client.threads.create())["thread_id"] for _ in range(count)]


async def main():
    client = get_client(url=URL, api_key=ADMIN)
    for thread in await threads(client, 20):  # warm-up
        await one_node(client, thread)
    out = {}

    samples = []
    for thread in await threads(client, N):
        started = time.perf_counter()
        await one_node(client, thread)
        samples.append(time.perf_counter() - started)
    out["one_node_wait"] = summary(samples)

    # Every other run with an `Idempotency-Key` (interleaved, so that both
    # see the same server), and each keyed request sent again: its replay.
    plain, keyed, replays = [], [], []
    run_tag = str(time.time())
    for i, thread in enumerate(await threads(client, 2 * N)):
        if i % 2:
            took, _ = await timed(one_node(client, thread))
            plain.append(took)
            continue
        key = {"Idempotency-Key": f"bench-{run_tag}-{i}"}
        wait = lambda: client.runs.wait(thread, "echo", input={"text": "x"}, headers=key)
        took, first = await timed(wait())
        keyed.append(took)
        took, again = await timed(wait())
        assert again == first, (first, again)
        replays.append(took)
    out["one_node_wait_unkeyed"] = summary(plain)
    out["one_node_wait_keyed"] = summary(keyed)
    out["one_node_wait_replayed"] = summary(replays)

    if SECRET_FILE:
        # An admin's runs beside a user's (each on threads they made),
        # interleaved: what the ownership checks cost.
        user = get_client(url=URL, api_key=token("ann", ["user"]))
        admins, users = [], []
        for i in range(2 * N):
            who = user if i % 2 else client
            thread = (await who.threads.create())["thread_id"]
            took, _ = await timed(one_node(who, thread))
            (users if i % 2 else admins).append(took)
        out["one_node_wait_admin"] = summary(admins)
        out["one_node_wait_user"] = summary(users)

    clients = [get_client(url=URL, api_key=ADMIN) for _ in range(16)]
    per_client = max(N // 16, 10)
    concurrent = []

    async def worker(c, mine):
        for thread in mine:
            started = time.perf_counter()
            await one_node(c, thread)
            concurrent.append(time.perf_counter() - started)

    prepared = [await threads(client, per_client) for _ in clients]
    started = time.perf_counter()
    await asyncio.gather(*(worker(c, mine) for c, mine in zip(clients, prepared)))
    elapsed = time.perf_counter() - started
    out["one_node_wait_16_clients"] = {
        **summary(concurrent),
        "runs_per_s": round(len(concurrent) / elapsed, 1),
    }

    # A thread made and a one-node run on it, both timed: sequentially,
    # then by 16 asyncio tasks sharing one client (one connection pool),
    # as an application serving its users through one `get_client` does.
    samples = []
    started = time.perf_counter()
    for _ in range(N):
        took, _ = await timed(create_and_run(client))
        samples.append(took)
    elapsed = time.perf_counter() - started
    out["create_and_run"] = {**summary(samples), "runs_per_s": round(N / elapsed, 1)}

    shared = []

    async def task(count):
        for _ in range(count):
            took, _ = await timed(create_and_run(client))
            shared.append(took)

    started = time.perf_counter()
    await asyncio.gather(*(task(per_client) for _ in range(16)))
    elapsed = time.perf_counter() - started
    out["create_and_run_16_tasks_one_client"] = {
        **summary(shared),
        "runs_per_s": round(len(shared) / elapsed, 1),
    }

    samples = []
    for _ in range(N):
        thread = (await client.threads.create())["thread_id"]
        took, _ = await timed(client.runs.wait(thread, "steps", input={"text": "x"}))
        samples.append(took)
    out["three_node_wait"] = summary(samples)

    pauses, resumes = [], []
    for _ in range(N):
        thread = (await client.threads.create())["thread_id"]
        took, _ = await timed(client.runs.wait(thread, "gate", input={"text": "x"}))
        pauses.append(took)
        took, _ = await timed(client.runs.wait(thread, "gate", command=Command(resume="yes")))
        resumes.append(took)
    out["pause"] = summary(pauses)
    out["resume"] = summary(resumes)

    firsts = []
    for _ in range(N):
        thread = (await client.threads.create())["thread_id"]
        started = time.perf_counter()
        first = None
        async for part in client.runs.stream(thread, "steps", input={"text": "x"}, stream_mode="updates"):
            if part.event == "updates" and first is None:
                first = time.perf_counter() - started
        firsts.append(first)
    out["first_update"] = summary(firsts)

    tag = str(time.time())
    for _ in range(25):
        await client.threads.create(metadata={"bench": tag})
    samples = []
    for _ in range(N):
        took, found = await timed(client.threads.search(metadata={"bench": tag}, limit=25))
        assert len(found) == 25
        samples.append(took)
    out["threads_search_25"] = summary(samples)
    print(json.dumps(out))


asyncio.run(main())
