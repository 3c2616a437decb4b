"""The `[rules]` settings of rule releases (§8.2): whether an approval needs a second person."""

from __future__ import annotations

from dataclasses import dataclass

FOUR_EYES_ENV = "RULE_RELEASES_FOUR_EYES"
"""The `eventsourcing` environment key the rule releases application reads `four_eyes` from."""


@dataclass(frozen=True)
class RulesSettings:
    """Rule releases. `four_eyes`: a release is approved only by someone other than the person
    who drafted it (the CLI's `--actor` or the console user)."""

    four_eyes: bool = False

    def validate(self) -> list[str]:
        return []

    def env(self) -> dict[str, str]:
        """These settings as the application's environment entries."""
        return {FOUR_EYES_ENV: "true" if self.four_eyes else "false"}
