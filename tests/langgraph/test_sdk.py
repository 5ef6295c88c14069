"""LangGraph's own Python client (`langgraph-sdk`) against `tollgate serve`.

Run by `scripts/langgraph-sdk`, which installs the client in a venv, starts
the `bench_server` example (its Rust graphs and a folder of blueprints) on
real sockets and sets:

- TOLLGATE_LG_URL: the LangGraph API of a server without a token;
- TOLLGATE_LG_TOKEN_URL, TOLLGATE_LG_TOKEN: one that needs a token.

Every call here is listed in docs/langgraph-api.md with its status.
"""

import asyncio
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import httpx
from langgraph_sdk import get_client
from langgraph_sdk.schema import Command

URL = os.environ["TOLLGATE_LG_URL"]
TOKEN_URL = os.environ["TOLLGATE_LG_TOKEN_URL"]
TOKEN = os.environ["TOLLGATE_LG_TOKEN"]


def run(coroutine):
    return asyncio.run(coroutine)


async def parts(stream):
    return [(part.event, part.data, getattr(part, "id", None)) async for part in stream]


class Assistants(unittest.TestCase):
    def test_search_get_graph_schemas(self):
        async def go():
            client = get_client(url=URL)
            found = await client.assistants.search(limit=100)
            names = {assistant["graph_id"] for assistant in found}
            self.assertTrue({"echo", "steps", "gate", "chat", "refunds"} <= names, names)
            only = await client.assistants.search(graph_id="steps")
            self.assertEqual([a["graph_id"] for a in only], ["steps"])
            echo = await client.assistants.get("echo")
            self.assertEqual(echo["graph_id"], "echo")
            same = await client.assistants.get(echo["assistant_id"])
            self.assertEqual(same, echo, "by name or by its UUID")
            graph = await client.assistants.get_graph("steps")
            ids = {node["id"] for node in graph["nodes"]}
            self.assertEqual(ids, {"__start__", "a", "b", "c", "__end__"})
            edges = {(edge["source"], edge["target"]) for edge in graph["edges"]}
            self.assertEqual(edges, {("__start__", "a"), ("a", "b"), ("b", "c"), ("c", "__end__")})
            schemas = await client.assistants.get_schemas("echo")
            self.assertEqual(schemas["input_schema"]["properties"]["text"], {"type": "string"})
            with self.assertRaises(httpx.HTTPStatusError) as missing:
                await client.assistants.get("nope")
            self.assertEqual(missing.exception.response.status_code, 404)
            with self.assertRaises(httpx.HTTPStatusError) as refused:
                await client.assistants.create(graph_id="echo", config={})
            self.assertEqual(refused.exception.response.status_code, 422)

        run(go())


class Threads(unittest.TestCase):
    def test_create_get_update_search_delete(self):
        async def go():
            client = get_client(url=URL)
            tag = os.urandom(4).hex()
            made = await client.threads.create(metadata={"suite": tag, "n": 1})
            thread = made["thread_id"]
            self.assertEqual(made["status"], "idle")
            self.assertEqual((await client.threads.get(thread))["metadata"], {"suite": tag, "n": 1})
            named = await client.threads.create(thread_id=f"named-{tag}", metadata={"suite": tag})
            self.assertEqual(named["thread_id"], f"named-{tag}")
            with self.assertRaises(httpx.HTTPStatusError) as exists:
                await client.threads.create(thread_id=f"named-{tag}")
            self.assertEqual(exists.exception.response.status_code, 409)
            again = await client.threads.create(thread_id=f"named-{tag}", if_exists="do_nothing")
            self.assertEqual(again["thread_id"], f"named-{tag}")
            updated = await client.threads.update(thread, metadata={"n": 2})
            self.assertEqual(updated["metadata"], {"suite": tag, "n": 2}, "merged")
            found = await client.threads.search(metadata={"suite": tag})
            self.assertEqual([t["thread_id"] for t in found], [f"named-{tag}", thread], "newest first")
            page = await client.threads.search(metadata={"suite": tag}, limit=1, offset=1)
            self.assertEqual([t["thread_id"] for t in page], [thread])
            await client.runs.wait(thread, "gate", input={"text": "t"})
            waiting = await client.threads.search(metadata={"suite": tag}, status="interrupted")
            self.assertEqual([t["thread_id"] for t in waiting], [thread])
            idle = await client.threads.search(metadata={"suite": tag}, status="idle")
            self.assertEqual([t["thread_id"] for t in idle], [f"named-{tag}"])
            self.assertEqual(await client.threads.count(metadata={"suite": tag}), 2)
            self.assertEqual(await client.threads.count(metadata={"suite": tag}, status="busy"), 0)
            with self.assertRaises(httpx.HTTPStatusError) as unknown:
                await client.threads.search(status="asleep")
            self.assertEqual(unknown.exception.response.status_code, 422)
            self.assertIn("asleep", unknown.exception.response.text)
            with self.assertRaises(httpx.HTTPStatusError) as listed:
                await client.threads.search(metadata=["suite"])
            self.assertEqual(listed.exception.response.status_code, 422)
            copied = await client.threads.copy(thread)
            self.assertNotEqual(copied["thread_id"], thread)
            # A run writes its graph and assistant into the thread's
            # metadata, as LangGraph's server does.
            gate = await client.assistants.get("gate")
            labelled = {"suite": tag, "n": 2, "graph_id": "gate", "assistant_id": gate["assistant_id"]}
            self.assertEqual((await client.threads.get(thread))["metadata"], labelled)
            # A run of another graph is refused, and does not relabel it.
            with self.assertRaises(httpx.HTTPStatusError) as other:
                await client.runs.wait(thread, "echo", input={"text": "x"})
            self.assertEqual(other.exception.response.status_code, 409)
            self.assertEqual((await client.threads.get(thread))["metadata"], labelled)
            self.assertEqual(copied["metadata"], labelled)
            self.assertEqual(copied["status"], "interrupted", "the paused gate waits on the copy too")
            self.assertEqual((await client.threads.get_state(copied["thread_id"]))["next"], ["gate"])
            await client.threads.delete(f"named-{tag}")
            with self.assertRaises(httpx.HTTPStatusError) as gone:
                await client.threads.get(f"named-{tag}")
            self.assertEqual(gone.exception.response.status_code, 404)

        run(go())

    def test_prune_deletes_the_listed_threads(self):
        async def go():
            client = get_client(url=URL)
            kept = (await client.threads.create())["thread_id"]
            idle = (await client.threads.create())["thread_id"]
            paused = (await client.threads.create())["thread_id"]
            await client.runs.wait(paused, "gate", input={"text": "p"})
            pruned = await client.threads.prune([idle, paused, "no-such-thread"])
            self.assertEqual(pruned, {"pruned_count": 2}, "an unknown id is passed over")
            for gone in (idle, paused):
                with self.assertRaises(httpx.HTTPStatusError) as missing:
                    await client.threads.get(gone)
                self.assertEqual(missing.exception.response.status_code, 404)
            self.assertEqual((await client.threads.get(kept))["thread_id"], kept)

        run(go())

    def test_prune_keep_latest_keeps_the_latest_run_and_the_state(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            for text in ("one", "two", "three"):
                await client.runs.wait(thread, "echo", input={"text": text})
            before = await client.threads.get_state(thread)
            runs = await client.runs.list(thread)
            self.assertEqual(len(runs), 3)
            pruned = await client.threads.prune([thread, "no-such-thread"], strategy="keep_latest")
            self.assertEqual(pruned, {"pruned_count": 1})
            left = await client.runs.list(thread)
            self.assertEqual([r["run_id"] for r in left], [runs[0]["run_id"]], "the latest run alone")
            after = await client.threads.get_state(thread)
            self.assertEqual(after["values"], before["values"])
            self.assertEqual(after["checkpoint"], before["checkpoint"])
            history = await client.threads.get_history(thread, limit=50)
            self.assertTrue(all(h["checkpoint"]["checkpoint_id"].startswith(runs[0]["run_id"])
                                for h in history), "only the latest run's checkpoints")
            # The next run builds on the state kept.
            out = await client.runs.wait(thread, "echo", input={"text": "four"})
            self.assertEqual(out["log"], ["echo:one", "echo:two", "echo:three", "echo:four"])

        run(go())

    def test_an_unknown_path_names_this_api_s_document(self):
        answer = httpx.get(URL + "/no/such/endpoint", timeout=30)
        self.assertEqual(answer.status_code, 404)
        error = answer.json()["error"]
        self.assertEqual(error["kind"], "not_found")
        self.assertIn("docs/langgraph-api.md", error["message"])

    def test_copy_keeps_the_whole_history(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create(metadata={"copy": "src"}))["thread_id"]
            await client.runs.wait(thread, "gate", input={"text": "one"})
            await client.runs.wait(thread, "gate", command=Command(resume="yes"))
            await client.runs.wait(thread, "gate", input={"text": "two"})
            copied = (await client.threads.copy(thread))["thread_id"]
            shown = lambda history: [(h["metadata"]["source"], h["metadata"]["step"], h["values"], h["next"])
                                     for h in history]
            source = await client.threads.get_history(thread, limit=50)
            copy = await client.threads.get_history(copied, limit=50)
            self.assertEqual(len(source), 3, "a run of two checkpoints, a paused one at its input")
            self.assertEqual(shown(copy), shown(source), "the whole history, checkpoint for checkpoint")
            self.assertEqual((await client.threads.get(copied))["status"], "interrupted")
            # The copy's question is answered on the copy alone.
            done = await client.runs.wait(copied, "gate", command=Command(resume="no"))
            self.assertEqual((done["answer"], done["log"]), ("no", ["gate", "gate"]))
            left = await client.threads.get_state(thread)
            self.assertEqual((left["next"], left["values"]["answer"]), (["gate"], "yes"))

        run(go())

    def test_state_history_and_update_state(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            empty = await client.threads.get_state(thread)
            self.assertEqual((empty["values"], empty["next"]), ({}, []))
            out = await client.runs.wait(thread, "steps", input={"text": "s"})
            self.assertEqual(out["log"], ["a", "b", "c"])
            state = await client.threads.get_state(thread)
            self.assertEqual(state["values"]["log"], ["a", "b", "c"])
            self.assertEqual(state["next"], [])
            self.assertEqual(state["metadata"]["source"], "loop")
            history = await client.threads.get_history(thread, limit=10)
            self.assertEqual([h["values"]["log"] for h in history],
                             [["a", "b", "c"], ["a", "b"], ["a"], []], "newest first")
            self.assertEqual([h["metadata"]["source"] for h in history],
                             ["loop", "loop", "loop", "input"])
            self.assertEqual([h["next"] for h in history], [[], ["c"], ["b"], ["a"]])
            older = await client.threads.get_history(thread, limit=2, before=history[1]["checkpoint"]["checkpoint_id"])
            self.assertEqual([h["values"]["log"] for h in older], [["a"], []])
            past = await client.threads.get_state(thread, checkpoint_id=history[2]["checkpoint"]["checkpoint_id"])
            self.assertEqual((past["values"]["log"], past["next"]), (["a"], ["b"]))
            # The same by a checkpoint config (`POST …/state/checkpoint`).
            by_config = await client.threads.get_state(thread, checkpoint=history[2]["checkpoint"])
            self.assertEqual((by_config["values"]["log"], by_config["next"]), (["a"], ["b"]))
            with self.assertRaises(httpx.HTTPStatusError) as unknown:
                await client.threads.get_state(thread, checkpoint={"checkpoint_id": "nope"})
            self.assertEqual(unknown.exception.response.status_code, 404)
            with self.assertRaises(httpx.HTTPStatusError) as nested:
                await client.threads.get_state(
                    thread, checkpoint={**history[2]["checkpoint"], "checkpoint_ns": "inner:1"})
            self.assertEqual(nested.exception.response.status_code, 422)
            # A second run on the thread continues its history (a thread
            # keeps to one graph: another is refused with 409).
            await client.runs.wait(thread, "steps", input={"text": "again"})
            history = await client.threads.get_history(thread, limit=20)
            self.assertEqual(len(history), 8)
            self.assertEqual(history[0]["values"]["log"], ["a", "b", "c", "a", "b", "c"])
            self.assertEqual(history[3]["values"]["text"], "again", "the second run's input")
            # Filtered by metadata: each run's input checkpoint, newest first.
            inputs = await client.threads.get_history(thread, limit=20, metadata={"source": "input"})
            self.assertEqual([h["values"]["text"] for h in inputs], ["again", "s"])
            first_input = await client.threads.get_history(thread, limit=1, metadata={"source": "input"},
                                                           before=inputs[0]["checkpoint"])
            self.assertEqual([h["values"]["text"] for h in first_input], ["s"])
            self.assertEqual(await client.threads.get_history(thread, metadata={"source": "fork"}), [])
            root = await client.threads.get_history(thread, limit=2, checkpoint={"checkpoint_ns": ""})
            self.assertEqual(len(root), 2)
            with self.assertRaises(httpx.HTTPStatusError) as nested:
                await client.threads.get_history(thread, checkpoint={"checkpoint_ns": "inner:1"})
            self.assertEqual(nested.exception.response.status_code, 422)
            with self.assertRaises(httpx.HTTPStatusError) as other:
                await client.runs.wait(thread, "echo", input={"text": "other graph"})
            self.assertEqual(other.exception.response.status_code, 409)

            # update_state on a paused thread, then a run without input goes on.
            gated = (await client.threads.create())["thread_id"]
            await client.runs.wait(gated, "gate", input={"text": "x"})
            written = await client.threads.update_state(gated, {"answer": "by hand", "log": ["edited"]}, as_node="gate")
            self.assertIn("checkpoint_id", written["checkpoint"])
            state = await client.threads.get_state(gated)
            self.assertEqual((state["values"]["answer"], state["next"]), ("by hand", []))
            self.assertEqual(state["metadata"]["source"], "update")
            done = await client.runs.wait(gated, "gate", input=None)
            self.assertEqual(done["log"], ["edited"])

        run(go())


class Runs(unittest.TestCase):
    def test_wait_on_a_new_thread_and_stateless(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            out = await client.runs.wait(thread, "echo", input={"text": "hi"})
            self.assertEqual(out["log"], ["echo:hi"])
            stateless = await client.runs.wait(None, "steps", input={"text": "x"})
            self.assertEqual(stateless["log"], ["a", "b", "c"])
            listed = await client.runs.list(thread)
            self.assertEqual(len(listed), 1)
            self.assertEqual(listed[0]["status"], "success")
            got = await client.runs.get(thread, listed[0]["run_id"])
            self.assertEqual(got["run_id"], listed[0]["run_id"])
            with self.assertRaises(httpx.HTTPStatusError) as missing:
                await client.runs.wait(thread, "nope", input={})
            self.assertEqual(missing.exception.response.status_code, 404)
            with self.assertRaises(httpx.HTTPStatusError) as bad:
                await client.runs.wait(thread, "echo", input={"text": 5})
            self.assertEqual(bad.exception.response.status_code, 422)

        run(go())

    def test_stream_modes(self):
        async def go():
            client = get_client(url=URL)
            got = await parts(client.runs.stream(None, "steps", input={"text": "x"},
                                                 stream_mode=["values", "updates"]))
            events = [event for event, _, _ in got]
            self.assertEqual(events[0], "metadata")
            self.assertEqual(events[-1], "end")
            updates = [data for event, data, _ in got if event == "updates"]
            self.assertEqual(updates, [{"a": {"log": ["a"]}}, {"b": {"log": ["b"]}}, {"c": {"log": ["c"]}}])
            values = [data["log"] for event, data, _ in got if event == "values"]
            self.assertEqual(values, [[], ["a"], ["a", "b"], ["a", "b", "c"]])
            custom = await parts(client.runs.stream(None, "progress", input={}, stream_mode="custom"))
            self.assertEqual([data for event, data, _ in custom if event == "custom"],
                             [{"done": 1, "of": 3}, {"done": 2, "of": 3}, {"done": 3, "of": 3}])
            debug = await parts(client.runs.stream(None, "echo", input={"text": "d"}, stream_mode="debug"))
            kinds = [data["event_type"] for event, data, _ in debug if event == "debug"]
            self.assertIn("node_completed", kinds)

        run(go())

    def test_agent_messages_and_tokens(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            got = await parts(client.runs.stream(
                thread, "chat", input={"messages": [{"role": "user", "content": "Hi there"}]},
                stream_mode=["messages-tuple", "updates", "values"]))
            events = [event for event, _, _ in got]
            chunks = [data[0]["content"] for event, data, _ in got if event == "messages"]
            self.assertEqual("".join(chunks), "Hello, Ann!")
            self.assertGreater(len(chunks), 1, "streamed in pieces")
            first_token = events.index("messages")
            agent_update = next(i for i, (event, data, _) in enumerate(got)
                                if event == "updates" and "chat" in data)
            self.assertLess(first_token, agent_update, "tokens arrive before the step commits")
            state = await client.threads.get_state(thread)
            messages = state["values"]["messages"]
            self.assertEqual([m["type"] for m in messages], ["human", "ai"])
            self.assertEqual(messages[0]["content"], "Hi there")
            self.assertEqual(messages[1]["content"], "Hello, Ann!")

        run(go())

    def test_interrupts_resume_and_resume_maps(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            paused = await client.runs.wait(thread, "gate", input={"text": "refund"})
            interrupt = paused["__interrupt__"][0]
            self.assertEqual(interrupt["value"], {"question": "approve refund?"})
            thread_view = await client.threads.get(thread)
            self.assertEqual(thread_view["status"], "interrupted")
            state = await client.threads.get_state(thread)
            self.assertEqual(state["next"], ["gate"])
            self.assertEqual(state["tasks"][0]["interrupts"][0]["id"], interrupt["id"])
            done = await client.runs.wait(thread, "gate", command=Command(resume="yes"))
            self.assertEqual((done["answer"], done["log"]), ("yes", ["gate"]))
            with self.assertRaises(httpx.HTTPStatusError) as nothing:
                await client.runs.wait(thread, "gate", command=Command(resume="again"))
            self.assertEqual(nothing.exception.response.status_code, 409)

            # Two interrupts at once, answered by one map.
            pair = (await client.threads.create())["thread_id"]
            paused = await client.runs.wait(pair, "pair", input={})
            ids = {i["value"]["question"]: i["id"] for i in paused["__interrupt__"]}
            self.assertEqual(set(ids), {"left?", "right?"})
            with self.assertRaises(httpx.HTTPStatusError) as ambiguous:
                await client.runs.wait(pair, "pair", command=Command(resume="one for both"))
            self.assertEqual(ambiguous.exception.response.status_code, 422)
            done = await client.runs.wait(pair, "pair", command=Command(
                resume={ids["left?"]: "L", ids["right?"]: "R"}))
            self.assertEqual(sorted(done["log"]), ["left=L", "right=R"])

            # A tool approval in the shape of LangChain's middleware.
            agent = (await client.threads.create())["thread_id"]
            paused = await client.runs.wait(agent, "refunds", input={"messages": [{"role": "user", "content": "Refund order 7"}]})
            request = paused["__interrupt__"][0]["value"]
            self.assertEqual(request["action_requests"][0]["name"], "issue_refund")
            self.assertEqual(request["action_requests"][0]["args"], {"id": 7})
            self.assertEqual(request["review_configs"][0]["allowed_decisions"], ["approve", "edit", "reject"])
            done = await client.runs.wait(agent, "refunds", command=Command(resume={"decisions": [{"type": "approve"}]}))
            self.assertEqual(done["messages"][-1]["content"], "Refunded 20 EUR for order 7.")
            tool = [m for m in done["messages"] if m["type"] == "tool"]
            self.assertEqual(tool[-1]["name"], "issue_refund")

        run(go())

    def test_interrupt_before_and_after_per_run(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            paused = await client.runs.wait(thread, "steps", input={"text": "b"}, interrupt_before=["b"])
            self.assertEqual(paused["log"], ["a"])
            state = await client.threads.get_state(thread)
            self.assertEqual(state["next"], ["b"])
            self.assertEqual((await client.threads.get(thread))["status"], "interrupted")
            done = await client.runs.wait(thread, "steps", input=None)
            self.assertEqual(done["log"], ["a", "b", "c"], "a run without input goes on")
            self.assertEqual((await client.threads.get(thread))["status"], "idle")
            after = (await client.threads.create())["thread_id"]
            paused = await client.runs.wait(after, "steps", input={"text": "a"}, interrupt_after=["a"])
            self.assertEqual((await client.threads.get(after))["status"], "interrupted")
            done = await client.runs.wait(after, "steps", input=None)
            self.assertEqual(done["log"], ["a", "b", "c"], "a ran once")
            with self.assertRaises(httpx.HTTPStatusError) as unknown:
                await client.runs.wait(thread, "steps", input={"text": "x"}, interrupt_before=["zz"])
            self.assertEqual(unknown.exception.response.status_code, 422)

        run(go())

    def test_command_update_and_goto(self):
        async def go():
            client = get_client(url=URL)
            # goto: a run paused before `b` goes to `c` instead, with an update.
            thread = (await client.threads.create())["thread_id"]
            paused = await client.runs.wait(thread, "steps", input={"text": "g"}, interrupt_before=["b"])
            self.assertEqual(paused["log"], ["a"])
            done = await client.runs.wait(thread, "steps", command=Command(update={"answer": "jumped"}, goto="c"))
            self.assertEqual((done["log"], done["answer"]), (["a", "c"], "jumped"))
            self.assertEqual((await client.threads.get_state(thread))["next"], [])
            # update alone: a paused gate asks again, about the new text.
            gated = (await client.threads.create())["thread_id"]
            await client.runs.wait(gated, "gate", input={"text": "x"})
            asked = await client.runs.wait(gated, "gate", command=Command(update={"text": "y"}))
            self.assertEqual(asked["__interrupt__"][0]["value"], {"question": "approve y?"})
            # Refused: a finished thread (409), an unknown node and resume
            # together with goto (422); nothing changes.
            with self.assertRaises(httpx.HTTPStatusError) as finished:
                await client.runs.wait(thread, "steps", command=Command(goto="a"))
            self.assertEqual(finished.exception.response.status_code, 409)
            with self.assertRaises(httpx.HTTPStatusError) as unknown:
                await client.runs.wait(gated, "gate", command=Command(goto="nowhere"))
            self.assertEqual(unknown.exception.response.status_code, 422)
            with self.assertRaises(httpx.HTTPStatusError) as both:
                await client.runs.wait(gated, "gate", command=Command(resume="ok", goto="gate"))
            self.assertEqual(both.exception.response.status_code, 422)
            still = await client.runs.wait(gated, "gate", command=Command(resume="fine"))
            self.assertEqual((still["answer"], still["text"]), ("fine", "y"))

        run(go())

    def test_a_run_from_a_checkpoint(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            await client.runs.wait(thread, "steps", input={"text": "first"})
            history = await client.threads.get_history(thread, limit=10)
            after_a = history[2]["checkpoint"]["checkpoint_id"]
            self.assertEqual(history[2]["values"]["log"], ["a"])
            # No input: a new run goes on from there (b and c run again).
            replayed = await client.runs.wait(thread, "steps", input=None, checkpoint_id=after_a)
            self.assertEqual(replayed["log"], ["a", "b", "c"])
            # Input: written there as the input, the graph starts again at `a`.
            again = await client.runs.wait(thread, "steps", input={"text": "second"},
                                           checkpoint={"checkpoint_id": after_a})
            self.assertEqual((again["log"], again["text"]), (["a", "a", "b", "c"], "second"))
            self.assertEqual(len(await client.runs.list(thread)), 3, "each start is a run of its own")
            with self.assertRaises(httpx.HTTPStatusError) as unknown:
                await client.runs.wait(thread, "steps", input=None, checkpoint_id="nope")
            self.assertEqual(unknown.exception.response.status_code, 404)
            other = (await client.threads.create())["thread_id"]
            with self.assertRaises(httpx.HTTPStatusError) as elsewhere:
                await client.runs.wait(other, "steps", input=None, checkpoint_id=after_a)
            self.assertEqual(elsewhere.exception.response.status_code, 404, "another thread's checkpoint")
            # A blueprint agent: a message given at its input checkpoint is
            # added there, and the agent answers it.
            chat = (await client.threads.create())["thread_id"]
            await client.runs.wait(chat, "chat", input={"messages": [{"role": "user", "content": "Hi there"}]})
            first = (await client.threads.get_history(chat, limit=10))[-1]["checkpoint"]["checkpoint_id"]
            await client.runs.wait(chat, "chat", input={"messages": [{"role": "user", "content": "Hello again"}]},
                                   checkpoint_id=first)
            messages = (await client.threads.get_state(chat))["values"]["messages"]
            self.assertEqual([(m["type"], m["content"]) for m in messages][-2:],
                             [("human", "Hello again"), ("ai", "Hello, Ann!")])

        run(go())

    def test_join_cancel_and_a_busy_thread(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            started = await client.runs.create(thread, "slow", input={"text": "300"})
            self.assertIn(started["status"], ["pending", "running"])
            with self.assertRaises(httpx.HTTPStatusError) as busy:
                await client.runs.create(thread, "echo", input={"text": "no"})
            self.assertEqual(busy.exception.response.status_code, 409)
            joined = await client.runs.join(thread, started["run_id"])
            self.assertEqual(joined["log"], ["waited"])
            self.assertEqual((await client.runs.get(thread, started["run_id"]))["status"], "success")

            long = await client.runs.create(thread, "slow", input={"text": "20000"})
            await asyncio.sleep(0.2)
            await client.runs.cancel(thread, long["run_id"], wait=True)
            self.assertEqual((await client.runs.get(thread, long["run_id"]))["status"], "interrupted")
            self.assertEqual((await client.threads.get(thread))["status"], "idle")
            await client.runs.delete(thread, long["run_id"])
            with self.assertRaises(httpx.HTTPStatusError) as gone:
                await client.runs.get(thread, long["run_id"])
            self.assertEqual(gone.exception.response.status_code, 404)

        run(go())

    def test_cancel_many_by_ids_and_by_status(self):
        async def go():
            client = get_client(url=URL)
            one = (await client.threads.create())["thread_id"]
            two = (await client.threads.create())["thread_id"]
            first = await client.runs.create(one, "slow", input={"text": "20000"})
            later = await client.runs.create(two, "echo", input={"text": "x"}, after_seconds=600)
            await asyncio.sleep(0.2)

            async def status(thread, run):
                return (await client.runs.get(thread, run))["status"]

            # By ids: the slow run stops; the pending one is left alone.
            await client.runs.cancel_many(thread_id=one, run_ids=[first["run_id"]])
            for _ in range(100):
                if await status(one, first["run_id"]) == "interrupted":
                    break
                await asyncio.sleep(0.05)
            self.assertEqual(await status(one, first["run_id"]), "interrupted")
            self.assertEqual(await status(two, later["run_id"]), "pending")
            # By status: every run waiting to start, and no other.
            running = await client.runs.create(one, "slow", input={"text": "20000"})
            for _ in range(200):
                if await status(one, running["run_id"]) == "running":
                    break
                await asyncio.sleep(0.05)
            await client.runs.cancel_many(status="pending")
            self.assertEqual(await status(two, later["run_id"]), "interrupted", "cancelled: never starts")
            self.assertEqual(await status(one, running["run_id"]), "running")
            # Every running one, rolled back: stopped and deleted.
            await client.runs.cancel_many(status="running", action="rollback")
            with self.assertRaises(httpx.HTTPStatusError) as gone:
                await client.runs.get(one, running["run_id"])
            self.assertEqual(gone.exception.response.status_code, 404)
            self.assertEqual((await client.threads.get(one))["status"], "idle")
            with self.assertRaises(httpx.HTTPStatusError) as neither:
                await client.runs.cancel_many()
            self.assertEqual(neither.exception.response.status_code, 422)
            with self.assertRaises(httpx.HTTPStatusError) as unknown:
                await client.runs.cancel_many(thread_id=one, run_ids=["no-such-run"])
            self.assertEqual(unknown.exception.response.status_code, 404)

        run(go())

    def test_create_batch_starts_stateless_runs(self):
        async def go():
            client = get_client(url=URL)
            made = await client.runs.create_batch([
                {"assistant_id": "echo", "input": {"text": "a"}},
                {"assistant_id": "steps", "input": {"text": "b"}},
            ])
            self.assertEqual(len(made), 2)
            self.assertEqual(len({run["run_id"] for run in made}), 2, "a run each")
            self.assertEqual([run["thread_id"] for run in made], [None, None], "stateless")
            # Each runs to its end (read through the native API).
            native = URL.removesuffix("/lg")
            for run, log in zip(made, (["echo:a"], ["a", "b", "c"])):
                for _ in range(100):
                    shown = httpx.get(f"{native}/runs/{run['run_id']}", timeout=30).json()
                    if shown["status"] == "completed":
                        break
                    await asyncio.sleep(0.05)
                self.assertEqual((shown["status"], shown["result"]["log"]), ("completed", log))
            with self.assertRaises(httpx.HTTPStatusError) as refused:
                await client.runs.create_batch([
                    {"assistant_id": "echo", "input": {"text": "c"}},
                    {"assistant_id": "echo", "input": {"text": "d"}, "multitask_strategy": "bogus"},
                ])
            self.assertEqual(refused.exception.response.status_code, 422)

        run(go())

    def test_multitask_interrupt_and_rollback(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            first = await client.runs.create(thread, "slow", input={"text": "20000"})
            await asyncio.sleep(0.2)
            second = await client.runs.wait(thread, "slow", input={"text": "1"},
                                            multitask_strategy="interrupt")
            self.assertEqual(second["log"], ["waited"])
            self.assertEqual((await client.runs.get(thread, first["run_id"]))["status"], "interrupted")
            runs = await client.runs.list(thread)
            self.assertEqual(len(runs), 2, "the interrupted run is kept")
            interrupted = await client.runs.list(thread, status="interrupted")
            self.assertEqual([r["run_id"] for r in interrupted], [first["run_id"]],
                             "a status filter keeps only the runs of that status")

            third = await client.runs.create(thread, "slow", input={"text": "20000"})
            await asyncio.sleep(0.2)
            await client.runs.wait(thread, "slow", input={"text": "1"}, multitask_strategy="rollback")
            with self.assertRaises(httpx.HTTPStatusError) as gone:
                await client.runs.get(thread, third["run_id"])
            self.assertEqual(gone.exception.response.status_code, 404, "rolled back: deleted")
            self.assertEqual(len(await client.runs.list(thread)), 3)

        run(go())

    def test_multitask_enqueue(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            first = await client.runs.create(thread, "turn", input={"text": "first:400"})
            second = await client.runs.create(thread, "turn", input={"text": "a"},
                                              multitask_strategy="enqueue")
            third = await client.runs.create(thread, "turn", input={"text": "b"},
                                             multitask_strategy="enqueue")
            self.assertEqual((second["status"], third["status"]), ("pending", "pending"))
            self.assertEqual(second["multitask_strategy"], "enqueue")
            self.assertEqual((await client.runs.get(thread, second["run_id"]))["status"], "pending")
            listed = [r["run_id"] for r in await client.runs.list(thread)]
            self.assertEqual(listed, [third["run_id"], second["run_id"], first["run_id"]])
            waiting = [r["run_id"] for r in await client.runs.list(thread, status="pending")]
            self.assertEqual(waiting, [third["run_id"], second["run_id"]],
                             "runs waiting to start, filtered by status, in their order")
            with self.assertRaises(httpx.HTTPStatusError) as busy:
                await client.runs.create(thread, "turn", input={"text": "no"})
            self.assertEqual(busy.exception.response.status_code, 409, "reject: runs wait on it")
            # Each in turn, on the state the one before left.
            joined = await client.runs.join(thread, third["run_id"])
            self.assertEqual(joined["log"], ["first", "a", "b"])
            for made in (first, second, third):
                self.assertEqual((await client.runs.get(thread, made["run_id"]))["status"], "success")
            self.assertEqual((await client.threads.get(thread))["status"], "idle")

            # Waited for, and streamed: each once its turn came.
            await client.runs.create(thread, "turn", input={"text": "slow:300"})
            waited = await client.runs.wait(thread, "turn", input={"text": "w"},
                                            multitask_strategy="enqueue")
            self.assertEqual(waited["log"][-2:], ["slow", "w"])
            await client.runs.create(thread, "turn", input={"text": "slow:300"})
            got = await parts(client.runs.stream(thread, "turn", input={"text": "s"},
                                                 stream_mode="updates", multitask_strategy="enqueue"))
            self.assertEqual([data for event, data, _ in got if event == "updates"],
                             [{"turn": {"log": ["s"]}}])

            # Cancelled while it waits: it never runs.
            blocker = await client.runs.create(thread, "turn", input={"text": "blocker:400"})
            doomed = await client.runs.create(thread, "turn", input={"text": "never"},
                                              multitask_strategy="enqueue")
            cancelled = await client.runs.cancel(thread, doomed["run_id"])
            self.assertEqual(cancelled["status"], "interrupted")
            await client.runs.join(thread, blocker["run_id"])
            await asyncio.sleep(0.6)
            log = (await client.threads.get_state(thread))["values"]["log"]
            self.assertEqual(log[-1], "blocker")
            self.assertNotIn("never", log)
            self.assertEqual((await client.runs.get(thread, doomed["run_id"]))["status"], "interrupted")
            await client.runs.delete(thread, doomed["run_id"])
            with self.assertRaises(httpx.HTTPStatusError) as gone:
                await client.runs.get(thread, doomed["run_id"])
            self.assertEqual(gone.exception.response.status_code, 404)

            # Behind a run that waits for a decision: after it is answered.
            gated = (await client.threads.create())["thread_id"]
            await client.runs.wait(gated, "gate", input={"text": "x"})
            queued = await client.runs.create(gated, "gate", input={"text": "y"},
                                              multitask_strategy="enqueue")
            await asyncio.sleep(0.5)
            self.assertEqual((await client.runs.get(gated, queued["run_id"]))["status"], "pending")
            await client.runs.wait(gated, "gate", command=Command(resume="ok"))
            second_pause = await client.runs.join(gated, queued["run_id"])
            self.assertEqual(second_pause["__interrupt__"][0]["value"], {"question": "approve y?"})

            # Refused: with a command, or without input on a thread.
            with self.assertRaises(httpx.HTTPStatusError) as command:
                await client.runs.create(gated, "gate", command=Command(resume="no"),
                                         multitask_strategy="enqueue")
            self.assertEqual(command.exception.response.status_code, 422)

        run(go())

    def test_after_seconds(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            began = time.monotonic()
            delayed = await client.runs.create(thread, "echo", input={"text": "later"}, after_seconds=1)
            self.assertEqual(delayed["status"], "pending")
            self.assertEqual((await client.threads.get(thread))["status"], "busy")
            done = await client.runs.join(thread, delayed["run_id"])
            self.assertGreaterEqual(time.monotonic() - began, 1.0)
            self.assertEqual(done["log"], ["echo:later"])
            self.assertEqual((await client.runs.get(thread, delayed["run_id"]))["status"], "success")
            began = time.monotonic()
            out = await client.runs.wait(None, "steps", input={"text": "x"}, after_seconds=0.5)
            self.assertGreaterEqual(time.monotonic() - began, 0.5)
            self.assertEqual(out["log"], ["a", "b", "c"])
            for bad in (-1, 1e12):
                with self.assertRaises(httpx.HTTPStatusError) as refused:
                    await client.runs.create(thread, "echo", input={"text": "x"}, after_seconds=bad)
                self.assertEqual(refused.exception.response.status_code, 422)
            # With `reject` on a busy thread: refused at once, as without a delay.
            busy_thread = (await client.threads.create())["thread_id"]
            await client.runs.create(busy_thread, "slow", input={"text": "300"})
            with self.assertRaises(httpx.HTTPStatusError) as busy:
                await client.runs.create(busy_thread, "slow", input={"text": "1"}, after_seconds=1)
            self.assertEqual(busy.exception.response.status_code, 409)

        run(go())

    def test_reconnecting_with_last_event_id_loses_nothing(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            whole = await parts(client.runs.stream(thread, "steps", input={"text": "r"},
                                                   stream_mode="updates", stream_resumable=True))
            updates = [(data, part_id) for event, data, part_id in whole if event == "updates"]
            self.assertEqual(len(updates), 3)
            run_id = (await client.runs.list(thread))[0]["run_id"]
            # Cut after the first update: the rest comes back from its id on.
            rest = await parts(client.runs.join_stream(thread, run_id, stream_mode="updates",
                                                       last_event_id=updates[0][1]))
            self.assertEqual([data for event, data, _ in rest if event == "updates"],
                             [data for data, _ in updates[1:]])

        run(go())


class Idempotency(unittest.TestCase):
    def test_a_retried_request_answers_what_the_first_made(self):
        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            key = {"Idempotency-Key": f"create-{thread}"}
            first = await client.runs.create(thread, "echo", input={"text": "once"}, headers=key)
            again = await client.runs.create(thread, "echo", input={"text": "once"}, headers=key)
            self.assertEqual(again["run_id"], first["run_id"], "a retry answers the first run")
            await client.runs.join(thread, first["run_id"])
            # Another request under the same key is refused, naming it.
            with self.assertRaises(httpx.HTTPStatusError) as reused:
                await client.runs.create(thread, "echo", input={"text": "other"}, headers=key)
            self.assertEqual(reused.exception.response.status_code, 422)
            self.assertIn(f"create-{thread}", reused.exception.response.text)
            # A waited run retried: its outcome again, no second run.
            waited = {"Idempotency-Key": f"wait-{thread}"}
            out = await client.runs.wait(thread, "echo", input={"text": "twice"}, headers=waited)
            same = await client.runs.wait(thread, "echo", input={"text": "twice"}, headers=waited)
            self.assertEqual(same, out)
            self.assertEqual(out["log"], ["echo:once", "echo:twice"])
            # A stream retried re-joins the run: the same events.
            streamed = {"Idempotency-Key": f"stream-{thread}"}
            events = await parts(client.runs.stream(thread, "echo", input={"text": "thrice"},
                                                    stream_mode="values", headers=streamed))
            replayed = await parts(client.runs.stream(thread, "echo", input={"text": "thrice"},
                                                      stream_mode="values", headers=streamed))
            self.assertEqual([e[:2] for e in replayed], [e[:2] for e in events])
            self.assertEqual(len(await client.runs.list(thread)), 3, "three runs, not six")
            # A copy retried: the same copy.
            copied = {"Idempotency-Key": f"copy-{thread}"}
            one = await client.threads.copy(thread, headers=copied)
            two = await client.threads.copy(thread, headers=copied)
            self.assertEqual(one["thread_id"], two["thread_id"])
            # A batch retried: the same runs, none started again.
            batched = {"Idempotency-Key": f"batch-{thread}"}
            payloads = [{"assistant_id": "echo", "input": {"text": f"b{i}"}} for i in range(3)]
            first = await client.runs.create_batch(payloads, headers=batched)
            again = await client.runs.create_batch(payloads, headers=batched)
            self.assertEqual([r["run_id"] for r in again], [r["run_id"] for r in first])
            self.assertEqual(len(first), 3)
            with self.assertRaises(httpx.HTTPStatusError) as reused:
                await client.runs.create_batch(payloads[:2], headers=batched)
            self.assertEqual(reused.exception.response.status_code, 422)

        run(go())


class Webhooks(unittest.TestCase):
    def test_the_outcome_is_posted_and_retried(self):
        received = []

        class Receiver(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                received.append(body)
                # The first delivery fails: it is retried.
                self.send_response(500 if len(received) == 1 else 200)
                self.end_headers()

            def log_message(self, *args):
                pass

        server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        hook = f"http://127.0.0.1:{server.server_port}/hook"

        async def go():
            client = get_client(url=URL)
            thread = (await client.threads.create())["thread_id"]
            run = await client.runs.create(thread, "echo", input={"text": "w"}, webhook=hook)
            for _ in range(100):
                if len(received) >= 2:
                    break
                await asyncio.sleep(0.1)
            self.assertEqual(len(received), 2, "delivered once more after a 500")
            self.assertEqual(received[1]["run_id"], run["run_id"])
            self.assertEqual(received[1]["status"], "success")
            self.assertEqual(received[1]["values"]["log"], ["echo:w"])
            own = URL.rsplit("/lg", 1)[0] + "/hook"
            with self.assertRaises(httpx.HTTPStatusError) as itself:
                await client.runs.create(thread, "echo", input={"text": "x"}, webhook=own)
            self.assertEqual(itself.exception.response.status_code, 422, "never to the server itself")
            with self.assertRaises(httpx.HTTPStatusError) as elsewhere:
                await client.runs.create(thread, "echo", input={"text": "x"}, webhook="http://10.1.2.3/hook")
            self.assertEqual(elsewhere.exception.response.status_code, 422, "only to allowed hosts")
            guarded = get_client(url=TOKEN_URL, api_key=TOKEN)
            with self.assertRaises(httpx.HTTPStatusError) as none_allowed:
                await guarded.runs.create(None, "echo", input={"text": "x"}, webhook=hook)
            self.assertEqual(none_allowed.exception.response.status_code, 422, "none by default")

        try:
            run(go())
        finally:
            server.shutdown()


class Durability(unittest.TestCase):
    """Runs that wait to start and webhooks that wait to be sent are kept
    in the database: a server killed with SIGKILL leaves them to the next
    one. The servers here are started by the test (TOLLGATE_LG_SERVER_BIN,
    on TOLLGATE_LG_DB, with TOLLGATE_LG_SERVER_ARGS)."""

    def start_server(self, db):
        command = [os.environ["TOLLGATE_LG_SERVER_BIN"], "--addr", "127.0.0.1:0", "--db", db,
                   "--allow-webhook-host", "127.0.0.1",
                   *os.environ.get("TOLLGATE_LG_SERVER_ARGS", "").split()]
        server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.addCleanup(lambda: (server.kill(), server.wait()))
        line = server.stdout.readline()
        self.assertTrue(line.startswith("listening on "), line)
        return server, line.split()[-1] + "/lg"

    def test_pending_runs_and_webhooks_outlive_a_killed_server(self):
        received = []

        class Receiver(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        hooks = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=hooks.serve_forever, daemon=True).start()
        self.addCleanup(hooks.shutdown)
        hook = f"http://127.0.0.1:{hooks.server_port}/hook"
        scratch = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, scratch, True)
        db = os.environ.get("TOLLGATE_LG_DB") or os.path.join(scratch, "durable.db")
        first, url = self.start_server(db)

        async def before():
            client = get_client(url=url)
            thread = (await client.threads.create())["thread_id"]
            await client.runs.wait(thread, "gate", input={"text": "x"})
            queued = await client.runs.create(thread, "gate", input={"text": "y"},
                                              multitask_strategy="enqueue", webhook=hook)
            delayed = await client.runs.create(None, "echo", input={"text": "late"},
                                               after_seconds=2, webhook=hook)
            return thread, queued["run_id"], delayed["run_id"]

        thread, queued, delayed = run(before())
        first.kill()
        first.wait()
        _, url = self.start_server(db)

        async def after():
            client = get_client(url=url)
            self.assertEqual((await client.runs.get(thread, queued))["status"], "pending")
            done = await client.runs.wait(thread, "gate", command=Command(resume="ok"))
            self.assertEqual(done["answer"], "ok")
            paused = await client.runs.join(thread, queued)
            self.assertEqual(paused["__interrupt__"][0]["value"], {"question": "approve y?"})
            for _ in range(100):
                if len(received) >= 2:
                    break
                await asyncio.sleep(0.1)
            by_run = {body["run_id"]: body for body in received}
            self.assertEqual(sorted(by_run), sorted([queued, delayed]), "each delivered once")
            self.assertEqual(len(received), 2)
            self.assertEqual(by_run[queued]["status"], "interrupted")
            self.assertEqual(by_run[delayed]["status"], "success")
            self.assertEqual(by_run[delayed]["values"]["log"], ["echo:late"])

        run(after())


class Store(unittest.TestCase):
    def test_put_get_search_namespaces_delete(self):
        async def go():
            client = get_client(url=URL)
            user = f"u{os.getpid()}"
            ns = ["users", user, "memories"]
            await client.store.put_item(ns, "lang", {"text": "prefers French answers", "kind": "pref", "n": 1})
            await client.store.put_item(ns, "food", {"text": "is vegetarian", "kind": "fact", "n": 2})
            await client.store.put_item(ns, "tz", {"text": "lives in Paris time", "kind": "pref", "n": 3})
            await client.store.put_item(["users", user, "notes"], "n1", {"text": "other"}, ttl=60)
            item = await client.store.get_item(ns, "lang")
            self.assertEqual(item["namespace"], ns)
            self.assertEqual(item["value"]["kind"], "pref")
            self.assertTrue(item["created_at"].endswith("Z"), item)
            newest = await client.store.search_items(ns, filter={"kind": "pref"}, limit=10)
            self.assertEqual([i["key"] for i in newest["items"]], ["tz", "lang"])
            compared = await client.store.search_items(ns, filter={"n": {"$gte": 2}})
            self.assertEqual(sorted(i["key"] for i in compared["items"]), ["food", "tz"])
            ranked = await client.store.search_items(["users", user], query="French answers please", limit=1)
            self.assertEqual(ranked["items"][0]["key"], "lang")
            self.assertGreater(ranked["items"][0]["score"], 0.3)
            listed = await client.store.list_namespaces(prefix=["users", user])
            self.assertEqual(listed["namespaces"], [["users", user, "memories"], ["users", user, "notes"]])
            shallow = await client.store.list_namespaces(prefix=["users", user], max_depth=2)
            self.assertEqual(shallow["namespaces"], [["users", user]])
            await client.store.delete_item(ns, "lang")
            with self.assertRaises(httpx.HTTPStatusError) as missing:
                await client.store.get_item(ns, "lang")
            self.assertEqual(missing.exception.response.status_code, 404)
            with self.assertRaises(httpx.HTTPStatusError) as bad:
                await client.store.search_items(ns, filter={"n": {"$near": 1}})
            self.assertEqual(bad.exception.response.status_code, 422)

        run(go())


class Crons(unittest.TestCase):
    def test_create_search_count_fire_delete_and_refusals(self):
        async def go():
            client = get_client(url=URL)
            native = URL.rsplit("/lg", 1)[0]
            tag = f"t{os.getpid()}"
            cron = await client.crons.create(
                "echo", schedule="* * * * * *", input={"text": "tick"}, metadata={"tag": tag}
            )
            self.assertEqual(cron["schedule"], "* * * * * *")
            self.assertEqual(cron["metadata"], {"tag": tag})
            self.assertIsNone(cron["thread_id"])
            self.assertTrue(cron["enabled"])
            self.assertEqual(cron["payload"]["input"], {"text": "tick"})
            found = await client.crons.search(assistant_id="echo", metadata={"tag": tag})
            self.assertEqual([c["cron_id"] for c in found], [cron["cron_id"]])
            self.assertEqual(await client.crons.count(metadata={"tag": tag}), 1)
            self.assertEqual(await client.crons.search(metadata={"tag": "other"}), [])
            # Sorted, and only the fields selected; an unknown sort key is refused.
            other = await client.crons.create("echo", schedule="0 0 1 1 *", metadata={"tag": tag})
            async with httpx.AsyncClient() as http:
                body = {"metadata": {"tag": tag}, "sort_by": "cron_id", "sort_order": "asc",
                        "select": ["cron_id", "enabled"]}
                listed = (await http.post(f"{URL}/runs/crons/search", json=body)).json()
                ids = sorted([cron["cron_id"], other["cron_id"]])
                self.assertEqual(listed, [{"cron_id": ids[0], "enabled": True},
                                          {"cron_id": ids[1], "enabled": True}])
                body["sort_by"] = "schedule"
                refused = await http.post(f"{URL}/runs/crons/search", json=body)
                self.assertEqual(refused.status_code, 422, refused.text)
            async with httpx.AsyncClient() as http:
                one = (await http.get(f"{URL}/runs/crons/{other['cron_id']}")).json()
                self.assertEqual((one["cron_id"], one["schedule"], one["metadata"]),
                                 (other["cron_id"], "0 0 1 1 *", {"tag": tag}))
                missing = await http.get(f"{URL}/runs/crons/no-such-cron")
                self.assertEqual(missing.status_code, 404, missing.text)
            await client.crons.delete(other["cron_id"])
            # Each second's tick starts a run of `echo` on the server's worker.
            async with httpx.AsyncClient() as http:
                shown = {}
                for _ in range(100):
                    shown = (await http.get(f"{native}/schedules/{cron['cron_id']}")).json()
                    if shown["runs_started"] >= 2:
                        break
                    await asyncio.sleep(0.05)
                self.assertGreaterEqual(shown["runs_started"], 2, shown)
                last = shown["last_run"]
                for _ in range(100):
                    ran = (await http.get(f"{native}/runs/{last}")).json()
                    if ran["status"] == "completed":
                        break
                    await asyncio.sleep(0.05)
                self.assertEqual(ran["status"], "completed", ran)
            await client.crons.delete(cron["cron_id"])
            self.assertEqual(await client.crons.count(metadata={"tag": tag}), 0)
            refusals = [
                client.crons.create_for_thread((await client.threads.create())["thread_id"], "echo", schedule="* * * * *"),
                client.crons.create("echo", schedule="* * * * *", timezone="America/New_York"),
                client.crons.create("echo", schedule="* * * * *", enabled=False),
                client.crons.update(cron["cron_id"], schedule="0 * * * *"),
            ]
            for refused in refusals:
                with self.assertRaises(httpx.HTTPStatusError) as error:
                    await refused
                self.assertEqual(error.exception.response.status_code, 422)
            with self.assertRaises(httpx.HTTPStatusError) as bad:
                await client.crons.create("echo", schedule="every minute")
            self.assertEqual(bad.exception.response.status_code, 422)
            with self.assertRaises(httpx.HTTPStatusError) as missing:
                await client.crons.create("nope", schedule="* * * * *")
            self.assertEqual(missing.exception.response.status_code, 404)

        run(go())


class Auth(unittest.TestCase):
    def test_the_token_as_x_api_key(self):
        async def go():
            with self.assertRaises(httpx.HTTPStatusError) as refused:
                await get_client(url=TOKEN_URL, api_key=None).assistants.search()
            self.assertEqual(refused.exception.response.status_code, 401)
            with self.assertRaises(httpx.HTTPStatusError) as wrong:
                await get_client(url=TOKEN_URL, api_key="wrong").assistants.search()
            self.assertEqual(wrong.exception.response.status_code, 401)
            client = get_client(url=TOKEN_URL, api_key=TOKEN)
            out = await client.runs.wait(None, "echo", input={"text": "k"})
            self.assertEqual(out["log"], ["echo:k"])

        run(go())


class FrontEnds(unittest.TestCase):
    """What Agent Chat UI (`useStream`) and Agent Inbox send, as they send
    it (docs/langgraph-api.md, "Front-ends")."""

    REFUND = {"messages": [{"role": "user", "content": "Refund order 7"}]}

    def post(self, path, body, expect=200):
        response = httpx.post(URL + path, json=body, timeout=30)
        self.assertEqual(response.status_code, expect, response.text)
        return response.json()

    def paused_refund(self):
        thread = self.post("/threads", {})["thread_id"]
        self.post(f"/threads/{thread}/runs/wait", {"assistant_id": "refunds", "input": self.REFUND})
        return thread

    def head(self, thread):
        return self.post(f"/threads/{thread}/history", {"limit": 1})[0]

    def test_a_tool_approval_as_agent_chat_ui_sees_and_decides_it(self):
        thread = self.paused_refund()
        # Listed by graph, as both UIs list threads.
        found = self.post("/threads/search", {"metadata": {"graph_id": "refunds"}, "limit": 1000})
        mine = [t for t in found if t["thread_id"] == thread]
        self.assertEqual(len(mine), 1)
        self.assertEqual(mine[0]["metadata"]["graph_id"], "refunds")
        self.assertTrue(mine[0]["metadata"]["assistant_id"])
        waiting = self.post("/threads/search", {"metadata": {"graph_id": "refunds"}, "status": "interrupted", "limit": 1000})
        self.assertIn(thread, [t["thread_id"] for t in waiting])
        # The history's head carries the pending interrupt.
        head = self.head(thread)
        request = head["tasks"][0]["interrupts"][0]["value"]["action_requests"][0]
        self.assertEqual(head["interrupts"][0]["id"], head["tasks"][0]["interrupts"][0]["id"])
        self.assertEqual((request["name"], request["args"], request["arguments"]), ("issue_refund", {"id": 7}, {"id": 7}))
        checkpoint = {"checkpoint_id": head["checkpoint"]["checkpoint_id"]}
        # New input sent with the head while the approval waits: 409, and
        # the paused run still waits.
        self.post(f"/threads/{thread}/runs/wait", {"assistant_id": "refunds", "checkpoint": checkpoint,
                                                   "input": {"messages": [{"role": "user", "content": "hello?"}]}}, 409)
        self.assertEqual(httpx.get(f"{URL}/threads/{thread}").json()["status"], "interrupted")
        # Unknown shapes are never new arguments.
        self.post(f"/threads/{thread}/runs/wait", {"assistant_id": "refunds", "command": {"resume": {"id": 99}}}, 422)
        # An edit with the head, its integer as text (as both UIs send it).
        edit = {"decisions": [{"type": "edit", "edited_action": {"name": "issue_refund", "args": {"id": "8"}}}]}
        done = self.post(f"/threads/{thread}/runs/wait", {"assistant_id": "refunds", "checkpoint": checkpoint,
                                                          "command": {"resume": edit}})
        calls = [c for m in done["messages"] if m["type"] == "ai" for c in m.get("tool_calls", [])]
        self.assertEqual([(c["name"], c["args"]) for c in calls], [("lookup_order", {"id": 7}), ("issue_refund", {"id": 8})],
                         "the model's call shows the arguments it ran with")
        self.assertEqual(done["messages"][-1]["content"], "Refunded 20 EUR for order 7.")
        self.assertEqual(httpx.get(f"{URL}/threads/{thread}").json()["status"], "idle")

    def test_mark_as_resolved_both_ways(self):
        # Agent Chat UI: `command.goto = "__end__"` with the head.
        thread = self.paused_refund()
        checkpoint = {"checkpoint_id": self.head(thread)["checkpoint"]["checkpoint_id"]}
        self.post(f"/threads/{thread}/runs/wait", {"assistant_id": "refunds", "checkpoint": checkpoint,
                                                   "command": {"goto": "__end__"}})
        view = httpx.get(f"{URL}/threads/{thread}").json()
        self.assertEqual((view["status"], view["interrupts"]), ("idle", {}))
        self.assertEqual(self.head(thread)["next"], [])
        # Agent Inbox: `update_state(values=None, as_node="__end__")`.
        thread = self.paused_refund()
        self.post(f"/threads/{thread}/state", {"values": None, "as_node": "__end__"})
        view = httpx.get(f"{URL}/threads/{thread}").json()
        self.assertEqual((view["status"], view["interrupts"]), ("idle", {}))
        runs = httpx.get(f"{URL}/threads/{thread}/runs").json()
        self.assertEqual(runs[0]["status"], "success")

    def test_agent_inbox_answers(self):
        # accept
        thread = self.paused_refund()
        done = self.post(f"/threads/{thread}/runs/wait", {"assistant_id": "refunds", "command": {"resume": [{"type": "accept", "args": None}]}})
        self.assertEqual(done["messages"][-2]["content"], '{"refunded":true}')
        # edit: `args` is {action, args}, the values text
        thread = self.paused_refund()
        edit = [{"type": "edit", "args": {"action": "issue_refund", "args": {"id": "15"}}}]
        done = self.post(f"/threads/{thread}/runs/wait", {"assistant_id": "refunds", "command": {"resume": edit}})
        calls = [c for m in done["messages"] if m["type"] == "ai" for c in m.get("tool_calls", [])]
        self.assertEqual(calls[-1]["args"], {"id": 15})
        # response: the tool call refused, the text told to the model
        thread = self.paused_refund()
        done = self.post(f"/threads/{thread}/runs/wait", {"assistant_id": "refunds", "command": {"resume": [{"type": "response", "args": "wrong order"}]}})
        tool = [m for m in done["messages"] if m["type"] == "tool"][-1]
        self.assertIn("wrong order", tool["content"])
        # ignore: refused without a reason
        thread = self.paused_refund()
        done = self.post(f"/threads/{thread}/runs/wait", {"assistant_id": "refunds", "command": {"resume": [{"type": "ignore", "args": None}]}})
        tool = [m for m in done["messages"] if m["type"] == "tool"][-1]
        self.assertIn("rejected", tool["content"])

    def test_a_graphs_own_question_from_agent_inbox(self):
        answers = {"response": ("Looks fine", "Looks fine"), "accept": (None, "signed"), "ignore": (None, "ignored")}
        for kind, (args, expected) in answers.items():
            thread = self.post("/threads", {})["thread_id"]
            paused = self.post(f"/threads/{thread}/runs/wait", {"assistant_id": "sign_off", "input": {"text": "q3"}})
            value = paused["__interrupt__"][0]["value"]
            self.assertEqual(value["action_request"], {"action": "sign_off", "args": {"text": "q3"}})
            listed = self.post("/threads/search", {"metadata": {"graph_id": "sign_off"}, "status": "interrupted", "limit": 1000})
            self.assertIn(thread, [t["thread_id"] for t in listed])
            done = self.post(f"/threads/{thread}/runs/wait", {"assistant_id": "sign_off", "command": {"resume": [{"type": kind, "args": args}]}})
            self.assertEqual(done["answer"], expected, kind)


if __name__ == "__main__":
    unittest.main(verbosity=2)
