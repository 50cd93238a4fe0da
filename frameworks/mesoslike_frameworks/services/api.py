"""Marathon's REST API over a :class:`~.core.ServicesCore`: each request a
plain function call, :meth:`ServicesApi.handle` (``Request`` in,
``Response`` out), so that the HTTP server underneath is a small seam
(:mod:`.httpd`). ``GET /v2/events`` answers a :class:`Response` with a
``stream``: the server hands it the connection's writer and keeps the
connection for as long as it writes.

What the handlers need of the running service is a :class:`Backend`: the
core under its lock (``read``), a change carried out — stored — before the
answer (``change``), who leads, and the event bus.

Authentication and authorization (docs/services.rst, "Security"): with
credentials, every request but ``/ping`` and the page's files needs an
operator's token (``Authorization: Bearer TOKEN``, Marathon's DC/OS form
``token=TOKEN`` the ``marathon`` client sends, or HTTP basic authentication
with the principal's name and its token); the ``manage_apps`` ACL
lists, per principal, the app groups it may see and change (``/team``
covers ``/team/web``); without a rule any operator may manage every app.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, TypeVar

import attrs

from mesoslike.credentials import Credentials, Refused
from mesoslike_frameworks.services.core import (AppRecord, ApiError, Deployment, Instance, ServicesCore, RUNNING,
                                                STAGING, STARTING, UNKNOWN, GOAL_RUNNING, SCHEDULED)
from mesoslike_frameworks.services.matching import explain
from mesoslike_frameworks.services.model import AppDefinition, ValidationError, format_timestamp, normalize_id

__all__ = ["Request", "Response", "Backend", "ServicesApi", "app_json", "task_json", "deployment_json",
           "queue_json", "MAX_BODY", "Authorizer"]

T = TypeVar("T")
#: the largest request body read (``PUT /v2/apps`` of many apps)
MAX_BODY = 4 * 1024 * 1024


@attrs.frozen
class Request:
    method: str
    path: str                                  # without the query
    query: Mapping[str, list[str]] = attrs.field(factory=dict)
    headers: Mapping[str, str] = attrs.field(factory=dict)   # lower-case names
    body: bytes = b""
    client: str = ""

    def flag(self, name: str) -> bool:
        return (self.query.get(name) or ["false"])[-1].lower() in ("true", "1", "yes", "")

    def values(self, name: str) -> list[str]:
        return [part for value in self.query.get(name, []) for part in value.split(",") if part]


@attrs.frozen
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: Mapping[str, str] = attrs.field(factory=dict)
    #: a long-lived answer: called with a writer (bytes -> None; raises when the client is gone)
    stream: Callable[[Callable[[bytes], None]], None] | None = None


def _json(status: int, document: object, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, json.dumps(document).encode(), headers=headers or {})


class Backend(Protocol):
    """What the API needs of the running service."""

    def read(self, fn: Callable[[ServicesCore], T]) -> T: ...

    def change(self, fn: Callable[[ServicesCore], T]) -> T: ...

    def leading(self) -> bool: ...

    def leader_address(self) -> str: ...

    def info(self) -> dict[str, Any]: ...

    def subscribe(self, types: frozenset[str], client: str) -> Iterator[dict[str, Any] | None]: ...

    def publish(self, event: dict[str, Any]) -> None: ...

    def recent_events(self) -> list[dict[str, Any]]: ...


class Authorizer:
    """Who a request is, and which apps it may manage."""

    def __init__(self, credentials: Credentials | None) -> None:
        self.credentials = credentials

    def principal(self, request: Request) -> tuple[str | None, Response | None]:
        """The principal of the request's token, or a 401 to answer."""
        if self.credentials is None:
            return None, None
        header = request.headers.get("authorization", "")
        token, user = "", None
        if header.lower().startswith("bearer "):
            token = header[7:].strip()
        elif header.startswith("token="):
            token = header[6:].strip()
        elif header.lower().startswith("basic "):
            # the marathon client's username/password (its only way into the event stream):
            # the principal's name and its token
            try:
                user, _, token = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                token = ""
        principal = self.credentials.principal_of_token(token) if token else None
        if user is not None and principal != user:
            principal = None
        if principal is None or not self.credentials.is_kind(principal, "operator"):
            return None, Response(401, json.dumps({"message": "a valid operator token is needed (Authorization: "
                                                              "Bearer TOKEN)"}).encode(),
                                  headers={"WWW-Authenticate": 'Bearer realm="mesoslike services"'})
        return principal, None

    def may(self, principal: str | None, app_id: str) -> bool:
        """Whether ``principal`` may see and change app ``app_id`` (the
        ``manage_apps`` ACL on the app's id or one of its groups)."""
        if self.credentials is None:
            return True
        parts = [p for p in app_id.split("/") if p]
        for group in ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]:
            try:
                self.credentials.check("manage_apps", principal, target=group)
                return True
            except Refused:
                continue
        return False

    def refusal(self, principal: str | None, app_id: str) -> ApiError:
        return ApiError(403, {"message": f"principal {principal!r} may not manage {app_id} (the manage_apps ACL)"})


# ------------------------------------------------------------------ views
def _ts(seconds: float | None) -> str | None:
    return format_timestamp(seconds) if seconds is not None else None


def task_json(instance: Instance, app: AppDefinition | None) -> dict[str, Any]:
    """A launched instance's task as Marathon shows it."""
    document: dict[str, Any] = {
        "appId": instance.app_id, "id": instance.task_id, "host": instance.hostname,
        "ports": list(instance.host_ports),
        "servicePorts": [p.port for p in app.port_definitions] if app is not None else [],
        "slaveId": instance.agent_id, "stagedAt": _ts(instance.staged_at), "startedAt": _ts(instance.started_at),
        "version": instance.version,
        "state": "TASK_UNKNOWN" if instance.condition == UNKNOWN else (instance.state or "TASK_STAGING"),
        "ipAddresses": [], "localVolumes": [], "role": app.role if app is not None else "*",
    }
    if app is not None and app.health_checks and instance.healthy is not None:
        document["healthCheckResults"] = [{"alive": instance.healthy, "consecutiveFailures": 0,
                                           "taskId": instance.task_id, "instanceId": instance.instance_id,
                                           "firstSuccess": None, "lastSuccess": None, "lastFailure": None,
                                           "lastFailureCause": None}]
    return document


def app_json(core: ServicesCore, record: AppRecord, embed: Iterable[str] = ()) -> dict[str, Any]:
    """An app with its counts and deployments (Marathon always shows them),
    its tasks and last failure when embedded."""
    embeds = {e.split(".", 1)[-1] for e in embed}
    app = record.definition
    document = app.to_json()
    instances = [i for i in core.instances_of(app.id) if i.launched]
    document.update({
        "tasksStaged": sum(1 for i in instances if i.condition in (STAGING, STARTING)),
        "tasksRunning": sum(1 for i in instances if i.condition == RUNNING),
        "tasksHealthy": sum(1 for i in instances if i.condition == RUNNING and i.healthy is True),
        "tasksUnhealthy": sum(1 for i in instances if i.condition == RUNNING and i.healthy is False),
        "deployments": [{"id": d.id} for d in core.deployments_of(app.id)],
    })
    if "tasks" in embeds:
        document["tasks"] = [task_json(i, app) for i in sorted(instances, key=lambda i: i.task_id)]
    if "lastTaskFailure" in embeds and record.last_failure is not None:
        document["lastTaskFailure"] = dict(record.last_failure)
    return document


def deployment_json(deployment: Deployment) -> dict[str, Any]:
    return {"id": deployment.id, "version": deployment.version, "affectedApps": deployment.affected_apps,
            "affectedPods": [], "steps": [{"actions": [a.to_json() for a in step]} for step in deployment.steps],
            "currentActions": [{**a.to_json(), "readinessCheckResults": []} for a in deployment.current_actions()],
            "currentStep": deployment.current + 1, "totalSteps": len(deployment.steps)}


#: the master's offer blockers (mesoslike.allocator.blockers) that keep offers from the service whatever it
#: declines: quota, no agent, nothing free (the cluster is full), the service disconnected
HOLDING_OFFERS = frozenset({"QUOTA_LIMIT", "QUOTA_HEADROOM", "NO_AGENTS", "MIN_ALLOCATABLE", "WEIGHT_SHARE",
                            "INACTIVE"})


def queue_json(core: ServicesCore, record: AppRecord, unused_offers: bool = False) -> dict[str, Any] | None:
    """The app's queue entry (None: nothing of it waits): how many instances
    wait, the delay, and why offers were not used (``processedOffersSummary``,
    with mesoslike's sentence in ``why``)."""
    waiting = [i for i in core.instances_of(record.id) if i.condition == SCHEDULED and i.goal == GOAL_RUNNING]
    if not waiting:
        return None
    left = core.delay_left(record)
    stats, last = record.stats, record.last_round
    why = record.waiting_for
    if not why and left > 0:
        why = f"back-off after failures: the next launch in {left:.1f}s"
    held = [(reason, message) for reason, message in core.master_blockers if reason in HOLDING_OFFERS]
    if not why and held:
        why = "the master makes the service no offers: " + "; ".join(message for _, message in held)
    if not why:
        reason = stats.main_reason()
        why = explain(reason) if reason or stats.offers else ("no offer has come since it was queued (the cluster "
                                                              "is full, or the role's quota is used up)")
    summary: dict[str, Any] = {
        "processedOffersCount": stats.offers, "unusedOffersCount": stats.unused,
        "lastUnusedOfferAt": _ts(record.last_unused_offer_at), "lastUsedOfferAt": _ts(record.last_used_offer_at),
        "rejectSummaryLastOffers": last.summary(), "rejectSummaryLaunchAttempt": stats.summary(),
        "why": why, "masterOfferBlockers": [{"reason": reason, "message": message} for reason, message in held],
    }
    document: dict[str, Any] = {
        "app": app_json(core, record), "count": len(waiting),
        "delay": {"timeLeftSeconds": int(round(left)), "overdue": left <= 0},
        "since": _ts(record.queued_since or min(i.scheduled_at for i in waiting)),
        "processedOffersSummary": summary,
    }
    if unused_offers:
        document["lastUnusedOffers"] = []
    return document


# ---------------------------------------------------------------- routing
class ServicesApi:
    """The REST API (module docstring). ``page``: the services page's files
    (URL path -> (content type, bytes)), served without authorization."""

    def __init__(self, backend: Backend, credentials: Credentials | None = None,
                 page: Mapping[str, tuple[str, bytes]] | None = None) -> None:
        self.backend = backend
        self.auth = Authorizer(credentials)
        self.page = dict(page or {})

    def handle(self, request: Request) -> Response:
        """Answer one request; never raises."""
        try:
            return self._handle(request)
        except ApiError as exc:
            return _json(exc.status, exc.body)
        except ValidationError as exc:
            return _json(422, exc.to_json())
        except Exception as exc:   # a bug must not take the server down; the client gets a 500
            import logging

            logging.getLogger("mesoslike_frameworks.services.api").exception("%s %s failed", request.method,
                                                                              request.path[:200])
            return _json(500, {"message": f"internal error: {type(exc).__name__}"})

    def _handle(self, request: Request) -> Response:
        path = request.path.rstrip("/") or "/"
        if request.method == "GET" and path in self.page:
            content_type, body = self.page[path]
            return Response(200, body, content_type, headers=_PAGE_HEADERS)
        if path == "/ping":
            return Response(200, b"pong\n", "text/plain")
        principal, refusal = self.auth.principal(request)
        if refusal is not None:
            return refusal
        if not self.backend.leading() and path not in ("/v2/leader", "/v2/info"):
            leader = self.backend.leader_address()
            return _json(503, {"message": f"this service is a standby, not the leader"
                                          f"{': the leader is ' + leader if leader else ''}", "leader": leader})
        parts = [p for p in path.split("/") if p]
        method = request.method
        if parts[:1] != ["v2"]:
            if path == "/services/events" and method == "GET":   # the page's recent events: what it may see
                return _json(200, {"events": [event for event in self.backend.recent_events()
                                              if self._may_see(principal, event)]})
            raise ApiError(404, {"message": f"no such endpoint {path[:200]}"})
        resource = parts[1] if len(parts) > 1 else ""
        rest = parts[2:]
        if resource == "info" and method == "GET":
            return _json(200, self.backend.info())
        if resource == "leader" and method == "GET":
            leader = self.backend.leader_address()
            if not leader:
                raise ApiError(404, {"message": "There is no leader"})
            return _json(200, {"leader": leader})
        if resource == "apps":
            return self._apps(request, principal, rest)
        if resource == "tasks":
            return self._tasks(request, principal, rest)
        if resource == "deployments":
            return self._deployments(request, principal, rest)
        if resource == "queue":
            return self._queue(request, principal, rest)
        if resource == "events" and method == "GET":
            return self._events(request, principal)
        raise ApiError(404 if resource not in ("info", "leader", "events") else 405,
                       {"message": f"no endpoint {method} {path[:200]}"})

    # ------------------------------------------------------------- apps
    def _apps(self, request: Request, principal: str | None, rest: list[str]) -> Response:
        method = request.method
        if not rest:
            if method == "GET":
                return self._list_apps(request, principal)
            if method == "POST":
                return self._create(request, principal)
            if method == "PUT":
                return self._put_many(request, principal)
            raise ApiError(405, {"message": f"{method} /v2/apps: use GET, POST or PUT (DELETE /v2/apps/ID deletes "
                                            "an app)"})
        # /v2/apps/{id...}[/restart|/tasks[/{task}]|/versions[/{v}]]
        for marker in ("restart", "tasks", "versions"):
            if marker in rest:
                index = len(rest) - 1 - rest[::-1].index(marker)
                if index >= 1:
                    app_id = "/" + "/".join(rest[:index])
                    return self._app_sub(request, principal, app_id, marker, rest[index + 1:])
        app_id = "/" + "/".join(rest)
        self._allowed(principal, app_id)
        force = request.flag("force") if "force" in request.query else False
        if method == "GET":
            embed = request.values("embed")
            return _json(200, {"app": self.backend.read(lambda core: app_json(core, core.app(app_id), embed))})
        if method in ("PUT", "PATCH"):
            document = _body(request)
            partial = method == "PATCH" or not ("partialUpdate" in request.query and not request.flag("partialUpdate"))
            deployment, created = self.backend.change(
                lambda core: core.update_apps([(app_id, document)], force=force, partial=partial))
            self._posted(request, document if isinstance(document, dict) else {})
            headers = {"Marathon-Deployment-Id": deployment.id}
            if created:
                headers["Location"] = f"/v2/apps{normalize_id(app_id)}"
                return _json(201, self.backend.read(lambda core: app_json(core, core.app(app_id))), headers)
            return _json(200, {"deploymentId": deployment.id, "version": deployment.version}, headers)
        if method == "DELETE":
            deployment = self.backend.change(lambda core: core.delete_app(app_id, force=force))
            self._posted(request, {"id": normalize_id(app_id)})
            return _json(200, {"deploymentId": deployment.id, "version": deployment.version},
                         {"Marathon-Deployment-Id": deployment.id})
        raise ApiError(405, {"message": f"{method} /v2/apps/ID: use GET, PUT, PATCH or DELETE"})

    def _list_apps(self, request: Request, principal: str | None) -> Response:
        wanted_id = (request.query.get("id") or [""])[-1]
        wanted_cmd = (request.query.get("cmd") or [""])[-1]
        labels = [label.partition("==") for label in request.values("label")]
        embed = request.values("embed")

        def listed(core: ServicesCore) -> list[dict[str, Any]]:
            apps = []
            for record in core.visible_apps():
                app = record.definition
                if not self.auth.may(principal, app.id) or (wanted_id and wanted_id not in app.id) \
                        or (wanted_cmd and wanted_cmd not in (app.cmd or "")):
                    continue
                if any(key not in app.labels or (sep and app.labels[key] != value) for key, sep, value in labels):
                    continue
                apps.append(app_json(core, record, embed))
            return apps
        return _json(200, {"apps": self.backend.read(listed)})

    def _create(self, request: Request, principal: str | None) -> Response:
        document = _body(request)
        if isinstance(document, dict) and isinstance(document.get("id"), str):
            self._allowed(principal, normalize_id(document["id"]))
        app, deployment = self.backend.change(lambda core: core.create_app(document))
        self._posted(request, app.to_json())
        body = self.backend.read(lambda core: app_json(core, core.app(app.id)))
        return _json(201, body, {"Location": f"/v2/apps{app.id}", "Marathon-Deployment-Id": deployment.id})

    def _put_many(self, request: Request, principal: str | None) -> Response:
        documents = _body(request)
        if not isinstance(documents, list) or not documents:
            raise ValidationError([("/", ["expected a non-empty array of apps"])])
        changes: list[tuple[str, object]] = []
        for index, document in enumerate(documents):
            if not isinstance(document, dict) or not isinstance(document.get("id"), str):
                raise ValidationError([(f"({index})/id", ["every app needs an id"])])
            self._allowed(principal, normalize_id(document["id"]))
            changes.append((document["id"], document))
        force = request.flag("force") if "force" in request.query else False
        deployment, _ = self.backend.change(lambda core: core.update_apps(changes, force=force))
        return _json(200, {"deploymentId": deployment.id, "version": deployment.version},
                     {"Marathon-Deployment-Id": deployment.id})

    def _app_sub(self, request: Request, principal: str | None, app_id: str, marker: str,
                 tail: list[str]) -> Response:
        self._allowed(principal, app_id)
        method = request.method
        force = request.flag("force") if "force" in request.query else False
        if marker == "restart" and method == "POST" and not tail:
            deployment = self.backend.change(lambda core: core.restart_app(app_id, force=force))
            return _json(200, {"deploymentId": deployment.id, "version": deployment.version},
                         {"Marathon-Deployment-Id": deployment.id})
        if marker == "versions" and method == "GET":
            def versions(core: ServicesCore) -> object:
                record = core.app(app_id)
                if not tail:
                    return {"versions": sorted(record.versions, reverse=True)}
                found = record.versions.get(tail[0])
                if found is None:
                    raise ApiError(404, {"message": f"App '{record.id}' does not exist in version {tail[0]}"})
                return found.to_json()
            return _json(200, self.backend.read(versions))
        if marker == "tasks":
            if method == "GET" and not tail:
                return _json(200, {"tasks": self.backend.read(
                    lambda core: [task_json(i, core.app(app_id).definition) for i in
                                  sorted(core.instances_of(core.app(app_id).id), key=lambda i: i.task_id)
                                  if i.launched])})
            if method == "DELETE":
                scale = request.flag("scale") if "scale" in request.query else False
                host = (request.query.get("host") or [""])[-1]

                def kill(core: ServicesCore) -> tuple[list[dict[str, Any]], Deployment | None]:
                    record = core.app(app_id)
                    if tail:
                        ids = ["/".join(tail)]
                        found = core.instance_by_task(ids[0])
                        if found is None or found.app_id != record.id:
                            raise ApiError(404, {"message": f"Task '{ids[0]}' does not exist"})
                    else:
                        ids = [i.task_id for i in core.instances_of(record.id)
                               if i.launched and (not host or i.hostname == host)]
                    killed, deployment = core.kill_tasks(ids, scale=scale, force=force, app_id=record.id)
                    return [task_json(i, record.definition) for i in killed], deployment
                tasks, scaled = self.backend.change(kill)
                if scaled is not None:
                    return _json(200, {"deploymentId": scaled.id, "version": scaled.version})
                if tail:
                    return _json(200, {"task": tasks[0] if tasks else None})
                return _json(200, {"tasks": tasks})
        raise ApiError(405 if not tail else 404, {"message": f"no endpoint {method} /v2/apps{app_id}/{marker}"})

    # ------------------------------------------------------------ tasks
    def _tasks(self, request: Request, principal: str | None, rest: list[str]) -> Response:
        if request.method == "GET" and not rest:
            states = {s.lower() for s in request.values("status")}

            def listed(core: ServicesCore) -> list[dict[str, Any]]:
                tasks = []
                for record in core.visible_apps():
                    if not self.auth.may(principal, record.id):
                        continue
                    for instance in sorted(core.instances_of(record.id), key=lambda i: i.task_id):
                        if not instance.launched:
                            continue
                        if states and instance.condition.lower() not in states:
                            continue
                        tasks.append(task_json(instance, record.definition))
                return tasks
            return _json(200, {"tasks": self.backend.read(listed)})
        if request.method == "POST" and rest == ["delete"]:
            document = _body(request)
            ids = document.get("ids") if isinstance(document, dict) else None
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or len(ids) > 100_000:
                raise ValidationError([("/ids", ['expected {"ids": ["TASK_ID", ...]}'])])
            scale = request.flag("scale") if "scale" in request.query else False
            force = request.flag("force") if "force" in request.query else False

            def kill(core: ServicesCore) -> tuple[list[dict[str, Any]], Deployment | None]:
                for task_id in ids:
                    instance = core.instance_by_task(task_id)
                    if instance is not None and not self.auth.may(principal, instance.app_id):
                        raise self.auth.refusal(principal, instance.app_id)
                killed, deployment = core.kill_tasks(ids, scale=scale, force=force)
                return [task_json(i, core.apps[i.app_id].definition if i.app_id in core.apps else None)
                        for i in killed], deployment
            tasks, deployment = self.backend.change(kill)
            if deployment is not None:
                return _json(200, {"deploymentId": deployment.id, "version": deployment.version})
            return _json(200, {"tasks": tasks})
        raise ApiError(405, {"message": "use GET /v2/tasks or POST /v2/tasks/delete"})

    # ------------------------------------------------------ deployments
    def _deployments(self, request: Request, principal: str | None, rest: list[str]) -> Response:
        if request.method == "GET" and not rest:
            return _json(200, self.backend.read(
                lambda core: [deployment_json(d) for d in core.deployments.values()
                              if all(self.auth.may(principal, a) for a in d.target)]))
        if request.method == "DELETE" and len(rest) == 1:
            force = request.flag("force") if "force" in request.query else False

            def cancel(core: ServicesCore) -> Deployment | None:
                found = core.deployments.get(rest[0])
                if found is not None:
                    for app_id in found.target:
                        self._allowed(principal, app_id)
                return core.cancel_deployment(rest[0], force=force)
            rollback = self.backend.change(cancel)
            if rollback is None:
                return Response(202, b"")
            return _json(200, {"deploymentId": rollback.id, "version": rollback.version},
                         {"Marathon-Deployment-Id": rollback.id})
        raise ApiError(405, {"message": "use GET /v2/deployments or DELETE /v2/deployments/ID"})

    # ------------------------------------------------------------ queue
    def _queue(self, request: Request, principal: str | None, rest: list[str]) -> Response:
        if request.method == "GET" and not rest:
            unused = "lastUnusedOffers" in request.values("embed")

            def listed(core: ServicesCore) -> list[dict[str, Any]]:
                items = []
                for record in core.visible_apps():
                    if self.auth.may(principal, record.id):
                        item = queue_json(core, record, unused)
                        if item is not None:
                            items.append(item)
                return items
            return _json(200, {"queue": self.backend.read(listed)})
        if request.method == "DELETE" and len(rest) >= 2 and rest[-1] == "delay":
            app_id = "/" + "/".join(rest[:-1])
            self._allowed(principal, app_id)
            self.backend.change(lambda core: core.reset_delay(app_id))
            return Response(204, b"")
        raise ApiError(405, {"message": "use GET /v2/queue or DELETE /v2/queue/APP/delay"})

    # ----------------------------------------------------------- events
    def _events(self, request: Request, principal: str | None) -> Response:
        types = frozenset(request.values("event_type"))
        events = self.backend.subscribe(types, request.client)

        def stream(write: Callable[[bytes], None]) -> None:
            try:
                for event in events:
                    if event is None:     # nothing for a while: a comment keeps proxies and clients awake
                        write(b":\n\n")
                        continue
                    if not self._may_see(principal, event):
                        continue
                    write(f"event: {event['eventType']}\ndata: {json.dumps(event)}\n\n".encode())
            finally:
                close = getattr(events, "close", None)
                if close is not None:
                    close()
        return Response(200, b"", "text/event-stream", headers={"Cache-Control": "no-cache"}, stream=stream)

    def _may_see(self, principal: str | None, event: Mapping[str, Any]) -> bool:
        app_id = event.get("appId")
        if isinstance(app_id, str):
            return self.auth.may(principal, app_id)
        plan = event.get("plan")
        if isinstance(plan, Mapping):
            apps = [a.get("id") for part in ("original", "target") for a in plan.get(part, {}).get("apps", [])]
            return all(self.auth.may(principal, a) for a in apps if isinstance(a, str))
        app = event.get("appDefinition")
        if isinstance(app, Mapping) and isinstance(app.get("id"), str):
            return self.auth.may(principal, app["id"])
        return True

    # ------------------------------------------------------------ helpers
    def _allowed(self, principal: str | None, app_id: str) -> None:
        if not self.auth.may(principal, normalize_id(app_id)):
            raise self.auth.refusal(principal, normalize_id(app_id))

    def _posted(self, request: Request, definition: Mapping[str, Any]) -> None:
        self.backend.publish({"eventType": "api_post_event", "clientIp": request.client, "uri": request.path,
                              "appDefinition": dict(definition)})


def _body(request: Request) -> Any:
    if len(request.body) > MAX_BODY:
        raise ApiError(413, {"message": f"the body is larger than {MAX_BODY} bytes"})
    try:
        return json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, {"message": f"the body is not JSON: {exc}"}) from None


#: sent with the page's files: it runs its own script and talks to its own service only
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache",
}
