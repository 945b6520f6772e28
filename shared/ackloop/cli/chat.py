"""``ackloop chat``: one conversation with an agent in the terminal.

Each line is a question of the same conversation, asked as ``ackloop ask`` asks (a query on the
topic, a durable run), its answer's text shown as the model writes it. A call that waits for a
person's approval is put to the user inline (approve, reject, or approve other arguments) and
recorded as ``ackloop runs approve`` records it; a wait for a named event says how to send it
and goes on waiting. Lines that start with ``/`` are commands (:data:`HELP`). Step lines and
notes go to stderr, the answers' text to stdout.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import typer
from pydantic import ValidationError

from ackloop.cli.ask import _check_files, file_part, note, publish_query
from ackloop.cli.errors import CliError
from ackloop.cli.follow import Followed, LiveText, answer_text, follow, outcome_line, step_line
from ackloop.cli.target import DIRECTORY, Target, connect
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import StepRecord
from ackloop.domain.wire import FilePart, QueryMessage
from ackloop.engine.waits.kinds import kind_of
from ackloop.store.deltas import DeltaRecord

HELP = """commands:
  /file PATH   attach a file (a local path or a gs:// or https:// URI) to the next question
  /new         start a new conversation
  /help        this text
  /quit        leave (so does end of input)"""

Kind = Literal["ask", "file", "new", "help", "quit", "empty", "unknown"]


@dataclass(frozen=True)
class Line:
    """One line the user typed, read: a question, or a command and its argument."""

    kind: Kind
    text: str = ""


def read_line(raw: str) -> Line:
    """What a line the user typed asks for."""
    text = raw.strip()
    if not text:
        return Line("empty")
    if not text.startswith("/"):
        return Line("ask", text)
    command, _, argument = text[1:].partition(" ")
    kinds: dict[str, Kind] = {"file": "file", "new": "new", "help": "help", "quit": "quit",
                              "exit": "quit", "q": "quit"}
    kind = kinds.get(command.lower(), "unknown")
    if kind == "file" and not argument.strip():
        return Line("unknown", "/file needs a path: /file photo.png")
    return Line(kind, argument.strip() if kind == "file" else text)


Decision = tuple[Literal["approve", "reject"], dict[str, Any] | None]


def read_decision(answer: str, args: dict[str, Any]) -> Decision | str:
    """The user's answer to an approval prompt: a decision, or what to say instead (a string)
    when the answer is not one. ``e {json}`` approves other arguments."""
    text = answer.strip()
    word, _, rest = text.partition(" ")
    if word.lower() in ("y", "yes", "a", "approve"):
        return ("approve", None)
    if word.lower() in ("n", "no", "r", "reject"):
        return ("reject", None)
    if word.lower() in ("e", "edit"):
        try:
            edited = json.loads(rest) if rest.strip() else None  # "e" alone: ask for them
        except json.JSONDecodeError as exc:
            return f"not JSON: {exc.msg}; e.g. e {json.dumps(args)}"
        if not isinstance(edited, dict):
            return f"give the arguments as a JSON object, e.g. e {json.dumps(args)}"
        return ("approve", edited)
    return "answer y (approve), n (reject) or e {JSON} (approve these arguments)"


Prompt = Callable[[str], Awaitable[str | None]]
"""Reads a line from the user after showing a prompt; None at the end of input."""


@dataclass
class ChatSession:
    """One conversation: its id once its first run made one, the files for the next question."""

    target: Target
    agent: str
    timeout: float
    conversation: str | None = None
    files: list[FilePart] = field(default_factory=list)
    streamed: set[str] = field(default_factory=set)
    """The steps of the last run whose text was shown as it was written."""

    async def turn(self, question: str, prompt: Prompt) -> Followed:
        """Ask ``question``, follow its run (deciding its approvals inline) to its end."""
        try:
            query = QueryMessage(request_id=f"chat-{uuid.uuid4().hex[:16]}", text=question,
                                 conversation_id=self.conversation, agent=self.agent,
                                 files=self.files)
        except ValidationError as exc:
            raise CliError(f"not a valid question: {exc.errors()[0]['msg']}") from exc
        if query.files:
            _check_files(query, self.target)
        message_id = await publish_query(self.target, query)
        self.files = []
        return await self._follow(run_id_for_request(query.request_id), message_id, prompt)

    async def _follow(self, run_id: str, message_id: str, prompt: Prompt) -> Followed:
        store = self.target.store()
        shown: set[str] = set()
        live = LiveText(lambda text: typer.echo(text, nl=False))
        self.streamed = set()

        def on_delta(delta: DeltaRecord) -> None:
            if delta.step not in shown:
                if delta.text:
                    self.streamed.add(delta.step)
                live.delta(delta)

        def on_step(step: StepRecord) -> None:
            if step.key not in shown:
                shown.add(step.key)
                live.end_line()
                note(step_line(step))

        while True:
            followed = await follow(
                store, run_id, timeout=self.timeout, message_id=message_id, until_waiting=True,
                on_step=on_step, on_delta=on_delta, quotas=self.target.settings,
                on_quota=live.line)
            live.end_line()
            if not followed.waiting or not await self._decide(followed, prompt):
                break
        if followed.run is not None and followed.run.conversation_id != self.conversation:
            self.conversation = followed.run.conversation_id
            note(f"conversation {self.conversation} (ackloop chat -c {self.conversation} "
                 "continues it)")
        return followed

    async def _decide(self, followed: Followed, prompt: Prompt) -> bool:
        """Put each call that waits for approval to the user; False when they left."""
        from ackloop.cli.runs import record_decision

        deps = None
        for step in followed.waiting:
            waiting = step.waiting
            if waiting is None or step.decision is not None:
                continue
            if waiting.kind != "approval":  # not the chat's to decide: what its kind says
                told = kind_of(waiting).told(followed.run_id, step.key, waiting)
                note("\n".join([*told, "press Enter to keep waiting"]))
                if await prompt("") is None:
                    return False
                continue
            args = dict(waiting.args or {})
            decision: Decision | str = ""
            while not isinstance(decision, tuple):
                if decision:
                    note(decision)
                shown = json.dumps(args, sort_keys=True)
                answer = await prompt(f"approve {waiting.tool}({shown})? "
                                      "[y]es / [n]o / [e]dit {JSON}: ")
                if answer is None:
                    return False
                decision = read_decision(answer, args)
            deps = deps or await self.target.engine_deps()
            try:
                await record_decision(deps, followed.run_id, step.key, decision[0], decision[1],
                                      None)
            except CliError as exc:
                note(f"not recorded: {exc}")
        return True


async def _read(prompt_text: str) -> str | None:
    """A line from the user: with line editing at a terminal; else the prompt goes to stderr,
    so that stdout holds the answers alone."""
    if sys.stdin.isatty():
        try:
            return await asyncio.to_thread(input, prompt_text)
        except EOFError:
            return None
    sys.stderr.write(prompt_text)
    sys.stderr.flush()
    line = await asyncio.to_thread(sys.stdin.readline)
    return line.rstrip("\n") if line else None


async def _session(session: ChatSession, prompt: Prompt) -> None:
    note(f"chat with agent {session.agent!r}"
         + (f" in conversation {session.conversation}" if session.conversation else "")
         + ": a question per line, /help for commands")
    while True:
        raw = await prompt("you> ")
        if raw is None:
            return
        line = read_line(raw)
        if line.kind == "quit":
            return
        if line.kind in ("help", "unknown"):
            note(HELP if line.kind == "help" else f"unknown command {line.text}\n{HELP}")
        elif line.kind == "new":
            session.conversation, session.files = None, []
            note("a new conversation starts with the next question")
        elif line.kind == "file":
            try:
                session.files.append(file_part(line.text))
                note(f"attached {line.text} to the next question")
            except CliError as exc:
                note(f"error: {exc}")
        elif line.kind == "ask":
            await _ask_once(session, line.text, prompt)


async def _ask_once(session: ChatSession, question: str, prompt: Prompt) -> None:
    try:
        followed = await session.turn(question, prompt)
    except CliError as exc:
        note(f"error: {exc}")
        return
    run = followed.run
    last = max((s.key for s in followed.steps if s.kind == "model"), default=None)
    if followed.answered and run is not None and last not in session.streamed:
        typer.echo(answer_text(run))  # not shown while it was written
    note(outcome_line(followed, session.timeout))


def chat(
    agent: str = typer.Option("default", help="Which agent of the deployment."),
    conversation: str = typer.Option(None, "--conversation", "-c",
                                     help="Continue this conversation."),
    timeout: float = typer.Option(300.0, help="Seconds to wait for each run."),
    directory: Path = DIRECTORY,
) -> None:
    """Talk with an agent: one conversation, its answers as they are written, approvals asked
    inline, files attached with /file."""
    target = connect(directory)
    session = ChatSession(target, agent, timeout, conversation)
    asyncio.run(_session(session, _read))
