"""Token checks: the server has a webhook token and an operator token it can read, and the agent token is set
when node steps go to agents. Only whether each is set and readable: a check never prints a token."""

from __future__ import annotations

from remediate.config.settings import OPERATOR, WEBHOOK, Settings, check_server_credentials
from remediate.doctor.model import Check, fail, ok, warn
from remediate.errors import ConfigError

FAMILY = "tokens"


def check_tokens(settings: Settings) -> list[Check]:
    auth = settings.auth
    try:
        credentials = check_server_credentials(auth)
    except ConfigError as exc:
        return [
            fail(
                FAMILY, "tokens: server", str(exc), "set REMEDIATE_WEBHOOK_TOKEN_FILE and REMEDIATE_OPERATOR_TOKEN_FILE"
            )
        ]
    checks = []
    if auth.insecure_no_auth and not credentials:
        checks.append(
            warn(
                FAMILY,
                "tokens: server",
                "insecure_no_auth: anyone who reaches the server may act",
                "set webhook_token_file and operator_token_file, and drop insecure_no_auth",
            )
        )
    else:
        for role, setting in ((WEBHOOK, "webhook_token"), (OPERATOR, "operator_token")):
            names = [c.name for c in credentials if role in c.roles]
            if names:
                checks.append(ok(FAMILY, f"tokens: {role}", f"set ({', '.join(names)})"))
            else:
                checks.append(
                    warn(
                        FAMILY,
                        f"tokens: {role}",
                        f"no token has the {role} role",
                        f"set {setting}_file (or name one in tokens_file)",
                    )
                )
    agent = settings.agent
    if agent.agents or agent.selector:
        try:
            token = agent.resolved_token()
        except ConfigError as exc:
            token, problem = None, str(exc)
        else:
            problem = "agent_token is not set"
        if token:
            checks.append(ok(FAMILY, "tokens: agent", "agent_token set (node steps go to agents)"))
        else:
            checks.append(
                fail(
                    FAMILY,
                    "tokens: agent",
                    f"{problem}: agents refuse every node step",
                    "set agent_token_file to the agents' shared token",
                )
            )
    return checks
