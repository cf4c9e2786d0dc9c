"""A scripted person at the terminal: the key presses an ``Operator`` reads, by poll or by episode tick."""

from __future__ import annotations

from collections import deque


class ScriptedKeys:
    """The person's key presses, one list per poll (the test's script of a person at the terminal)."""

    def __init__(self, auto_ready: bool = False) -> None:
        self.auto_ready = auto_ready  # press Enter whenever the task asks for "ready"
        self.queue: deque[list[str]] = deque()
        self.at_tick: dict[int, list[str]] = {}
        self.on_prompt: list[tuple[str, list[str]]] = []
        self.env = None  # a RealTaskEnv: press_at counts its ticks

    def press(self, *keys: str) -> None:
        """Keys the next poll reads."""
        self.queue.append(list(keys))

    def press_at(self, tick: int, *keys: str) -> None:
        """Keys read at the first poll once the episode has taken ``tick`` steps."""
        self.at_tick[tick] = list(keys)

    def press_on_prompt(self, text: str, *keys: str) -> None:
        """Keys read once the task's prompt to the person contains ``text`` (as a person reads the console)."""
        self.on_prompt.append((text, list(keys)))

    def __call__(self) -> list[str]:
        prompt = getattr(getattr(self.env, "operator", None), "prompt", "")
        if self.auto_ready and "press Enter (ready)" in prompt:
            return ["enter"]
        for i, (text, keys) in enumerate(self.on_prompt):
            if text in prompt:
                del self.on_prompt[i]
                return keys
        if self.env is not None and self.env._tick in self.at_tick:
            return self.at_tick.pop(self.env._tick)
        return self.queue.popleft() if self.queue else []
