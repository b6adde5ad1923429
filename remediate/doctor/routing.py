"""Routing checks: does AlertManager send each alert a loaded playbook matches to this server's receiver, with
the `repeat_interval` its ladder needs and `send_resolved` its undo needs?

AlertManager's own configuration comes from its `GET /api/v2/status` (`config.original`, the YAML it loaded),
and the route tree is walked as AlertManager's dispatcher does (dispatch.Route.Match): a route whose matchers
match is entered; its children are tried in order, each match kept, stopping after the first that matches
unless it has `continue: true`; a route none of whose children matches is itself the result. Children inherit
receiver, group_* and repeat_interval from their parent. The labels walked are the alertname, the rule's own
`labels:` and the playbook's equality matchers: a route on a label only the expression gives is not entered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import yaml

from remediate.config.durations import format_duration, parse_duration
from remediate.doctor.model import Check, fail, ok, warn
from remediate.doctor.probe import Probe, ProbeError, shown_without_query
from remediate.doctor.rules import Rule
from remediate.intake.matchers import Matcher, MatcherSyntaxError, MatchType, parse_matcher
from remediate.playbooks.model import Playbook

FAMILY = "routing"
SECRET = "<secret>"  # noqa: S105 (not a secret: the placeholder AlertManager shows for one)
"""What AlertManager shows in config.original for a secret (credentials; the webhook url in newer releases)."""
DEFAULT_REPEAT_INTERVAL = timedelta(hours=4)
"""AlertManager's default repeat_interval (config.DefaultRouteOpts)."""


class RoutingConfigError(ValueError):
    """AlertManager's configuration as /api/v2/status shows it cannot be read."""


@dataclass(frozen=True)
class Route:
    receiver: str
    matchers: tuple[Matcher, ...]
    continue_: bool
    repeat_interval: timedelta
    routes: tuple[Route, ...]
    path: str
    """Where it is in the tree: `route`, `route.routes[0]`, ..."""

    def match(self, labels: Mapping[str, str]) -> list[Route]:
        if not all(m.matches(labels) for m in self.matchers):
            return []
        found: list[Route] = []
        for child in self.routes:
            matched = child.match(labels)
            found.extend(matched)
            if matched and not child.continue_:
                break
        return found or [self]


@dataclass(frozen=True)
class Webhook:
    receiver: str
    url: str
    send_resolved: bool


def _matchers(raw: Mapping[str, Any], path: str) -> tuple[Matcher, ...]:
    """A route's `match` (equality), `match_re` (regex) and `matchers` (AlertManager's matcher syntax)."""
    try:
        found = [Matcher(str(k), MatchType.EQUAL, str(v)) for k, v in (raw.get("match") or {}).items()]
        found += [Matcher(str(k), MatchType.REGEX, str(v)) for k, v in (raw.get("match_re") or {}).items()]
        for text in raw.get("matchers") or []:
            text = str(text).strip()
            parts = text[1:-1].split(",") if text.startswith("{") and text.endswith("}") else [text]
            found += [parse_matcher(part) for part in parts if part.strip()]
    except MatcherSyntaxError as exc:
        raise RoutingConfigError(f"{path}: {exc}") from exc
    return tuple(found)


def parse_route(raw: Mapping[str, Any], parent: Route | None = None, path: str = "route") -> Route:
    try:
        repeat = raw.get("repeat_interval")
        interval = (
            parse_duration(str(repeat))
            if repeat is not None
            else (parent.repeat_interval if parent else DEFAULT_REPEAT_INTERVAL)
        )
    except ValueError as exc:
        raise RoutingConfigError(f"{path}.repeat_interval: {exc}") from exc
    route = Route(
        receiver=str(raw.get("receiver") or (parent.receiver if parent else "")),
        matchers=_matchers(raw, path),
        continue_=bool(raw.get("continue", False)),
        repeat_interval=interval,
        routes=(),
        path=path,
    )
    children = tuple(
        parse_route(child, route, f"{path}.routes[{index}]") for index, child in enumerate(raw.get("routes") or [])
    )
    return Route(route.receiver, route.matchers, route.continue_, route.repeat_interval, children, path)


def webhooks(config: Mapping[str, Any]) -> list[Webhook]:
    return [
        Webhook(str(receiver.get("name")), str(hook.get("url", "")), bool(hook.get("send_resolved", True)))
        for receiver in config.get("receivers") or []
        for hook in receiver.get("webhook_configs") or []
    ]


def read_config(probe: Probe, alertmanager_url: str) -> dict[str, Any]:
    """The YAML AlertManager loaded, from its /api/v2/status."""
    body = probe.get_json(f"{alertmanager_url.rstrip('/')}/api/v2/status")
    original = (body.get("config") or {}).get("original") if isinstance(body, dict) else None
    if not isinstance(original, str):
        raise RoutingConfigError("its /api/v2/status has no config.original")
    try:
        config = yaml.safe_load(original)
    except yaml.YAMLError as exc:
        raise RoutingConfigError(f"config.original is not YAML: {exc}") from exc
    if not isinstance(config, dict) or not isinstance(config.get("route"), dict):
        raise RoutingConfigError("config.original has no route")
    return config


def alert_labels(playbook: Playbook, alertname: str, rules: Iterable[Rule]) -> dict[str, str]:
    """The labels known before the expression runs: alertname, the rule's own, the playbook's `=` matchers."""
    labels = {"alertname": alertname}
    rule = next((r for r in rules if r.alert and r.name == alertname), None)
    if rule is not None:
        labels.update(dict(rule.labels))
    for matcher in playbook.matchers:
        if matcher.type is MatchType.EQUAL:
            labels.setdefault(matcher.name, matcher.value)
    return labels


def check_routing(
    probe: Probe,
    alertmanager_url: str | None,
    playbooks: Iterable[Playbook],
    rules: Iterable[Rule],
    this_server: Callable[[str], bool],
) -> list[Check]:
    playbooks, rules = list(playbooks), list(rules)
    if alertmanager_url is None:
        return [
            warn(
                FAMILY,
                "routing: alertmanager",
                "alertmanager_url is not set: routes not checked",
                "set alertmanager_url to the AlertManager that sends to this server",
            )
        ]
    try:
        config = read_config(probe, alertmanager_url)
        tree = parse_route(config["route"])
    except (ProbeError, RoutingConfigError) as exc:
        return [
            fail(
                FAMILY,
                "routing: alertmanager",
                f"cannot read its configuration: {exc}",
                "check alertmanager_url (its /api/v2/status must answer)",
            )
        ]
    hooks = webhooks(config)
    ours = {hook.receiver: hook for hook in hooks if this_server(hook.url)}
    hidden = {hook.receiver: hook for hook in hooks if hook.url == SECRET}
    checks: list[Check] = []
    if not ours and hidden:
        # A release that keeps the webhook url secret shows <secret> (0.25 shows it): which one is ours is unknown.
        ours = hidden
        checks.append(
            warn(
                FAMILY,
                "routing: receiver",
                f"AlertManager hides the webhook URLs of {', '.join(sorted(hidden))}: each is taken as this server's",
                "check by hand that one of them is <this server>/webhook",
            )
        )
    if not ours:
        listed = ", ".join(f"{h.receiver}: {shown_without_query(h.url)}" for h in hooks) or "none"
        return [
            fail(
                FAMILY,
                "routing: receiver",
                f"no webhook receiver points at this server (webhooks: {listed})",
                "add a webhook receiver with url <this server>/webhook (alertmanager/alertmanager.yml)",
            )
        ]
    if not checks:
        checks.append(ok(FAMILY, "routing: receiver", f"receiver {', '.join(sorted(ours))} points at this server"))
    for playbook in playbooks:
        for alertname in playbook.alertnames:
            labels = alert_labels(playbook, alertname, rules)
            checks.append(_check_alert(tree, ours, playbook, labels))
    return checks


def _check_alert(tree: Route, ours: Mapping[str, Webhook], playbook: Playbook, labels: Mapping[str, str]) -> Check:
    alertname = labels["alertname"]
    name = f"routing: {alertname} (playbook {playbook.name})"
    matched = tree.match(labels)
    reaching = [route for route in matched if route.receiver in ours]
    if not reaching:
        receivers = ", ".join(sorted({r.receiver or "(none)" for r in matched}))
        seen = f"goes to {receivers}, not to this server ({', '.join(sorted(ours))})"
        missed = _nearest_miss(tree, ours, labels)
        if missed is None:
            fix = f"route alertname={alertname} to {sorted(ours)[0]} with continue: true before other routes"
            return fail(FAMILY, name, seen, fix)
        route, unmatched = missed
        shown = (
            ", ".join(f"{m.name}{m.type.value}{m.value!r}" for m in unmatched) or "an earlier route without continue"
        )
        seen += f": {route.path} -> {route.receiver} is not entered ({shown})"
        if unmatched and all(m.name not in labels for m in unmatched):
            label = unmatched[0].name
            fix = f"drop the {label} matcher of {route.path} (the alert has no {label} label), or give the rule one"
        else:
            fix = f"make {route.path} match the alert (or put it first, with continue: true on the routes before it)"
        return fail(FAMILY, name, seen, fix)
    route = reaching[0]
    hook = ours[route.receiver]
    where = f"{route.path} -> {route.receiver}, repeat_interval {format_duration(route.repeat_interval)}"
    if playbook.undoes and not hook.send_resolved:
        return fail(
            FAMILY,
            name,
            f"{where}, send_resolved false: its on_resolved steps never run",
            f"set send_resolved: true on receiver {route.receiver}",
        )
    climbing = [rung.holds_for for rung in playbook.rungs[:-1]]
    if climbing and route.repeat_interval > min(climbing):
        shortest = format_duration(min(climbing))
        return warn(
            FAMILY,
            name,
            f"{where}: the ladder climbs only when AlertManager re-sends, "
            f"{format_duration(route.repeat_interval)} instead of holds_for {shortest}",
            f"set repeat_interval: {shortest} (or less) on {route.path}",
        )
    needs = f" <= holds_for {format_duration(min(climbing))}" if climbing else ""
    return ok(FAMILY, name, f"{where}{needs}")


def _nearest_miss(
    tree: Route, ours: Mapping[str, Webhook], labels: Mapping[str, str]
) -> tuple[Route, list[Matcher]] | None:
    """The first route to one of our receivers, and the matchers on its way down that the alert does not match
    (empty: every matcher matches, an earlier sibling without `continue` took the alert); None: no such route."""

    def walk(route: Route, failing: list[Matcher]) -> tuple[Route, list[Matcher]] | None:
        failing = failing + [m for m in route.matchers if not m.matches(labels)]
        if route is not tree and route.receiver in ours:
            return route, failing
        return next((found for child in route.routes if (found := walk(child, failing)) is not None), None)

    return walk(tree, [])
