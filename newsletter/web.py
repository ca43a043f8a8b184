"""``newsletter serve``: the small web app readers use (Flask, any WSGI server).

Routes (relative to ``[site] app_url``):

=====================================  ===========================================================
``GET/POST /subscribe``                form (email, name, tags) → double opt-in email; at most one
                                       confirmation per address per hour (persisted in the store)
``GET /confirm?t=`` / ``POST``         GET shows one button (link scanners only GET); POST
                                       activates. Links expire (48 h); a used link changes nothing
``GET/POST /preferences?t=``           followed tags (or every tag); email or feeds only; OPML link
``GET /opml?tag=<slug>…``              OPML 2.0 of the chosen tags' feeds (attachment)
``GET /unsubscribe?t=``                one button
``POST /unsubscribe?t=``               body ``List-Unsubscribe=One-Click`` unsubscribes at once, no
                                       cookie or login (RFC 8058 §3.1)
``POST /webhooks/<provider>``          bounce and complaint events (:mod:`newsletter.webhooks`)
``GET /`` and ``GET /<file>``          the feeds directory as static files (local preview)
=====================================  ===========================================================

CSRF: the subscribe and preferences forms carry a signed token (itsdangerous,
salt ``newsletter.csrf``) binding the form name, the subject (the address for
preferences), its issue time (valid 12 h) and a hash of a random cookie
(``newsletter_csrf``, SameSite=Lax, HttpOnly): the signed double-submit pattern.
Token-carrying routes (confirm, unsubscribe) need no cookie: the signed link is
the credential. Every page is sent with ``Referrer-Policy: no-referrer`` (links
hold tokens), a strict ``Content-Security-Policy`` and ``X-Frame-Options: DENY``.

Production: any WSGI server, e.g.
``NEWSLETTER_CONFIG=/etc/newsletter.toml gunicorn -w 2 -b 127.0.0.1:8080 'newsletter.web:app_from_env()'``
behind a TLS proxy.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from datetime import datetime
from typing import Callable, Optional
from urllib.parse import urlsplit

from flask import Flask, Response, redirect, request, send_from_directory
from itsdangerous import BadSignature, URLSafeSerializer

from .config import Config, load_config, utcnow
from .errors import NewsletterError
from .feeds import opml_document
from .links import Links
from .render import Renderer, labels_for
from .store import Store
from .subscribers import make_subscriber
from .transports import Transport, make_transport

Clock = Callable[[], datetime]

CONFIRM_HOURS = 48
CONFIRM_INTERVAL_SECONDS = 3600
CSRF_MAX_AGE_SECONDS = 12 * 3600
CSRF_COOKIE = "newsletter_csrf"

WEB_LABELS = {
    "en": {
        "subscribe_title": "Subscribe by email", "email": "Email address", "name": "Name (optional)",
        "choose_tags": "Tags", "none_means_all": "Tick none to get every tag.", "subscribe_button": "Subscribe",
        "check_inbox": "Almost done: if {email} can receive our email, a confirmation link is on its way. "
                       "Open it within {hours} hours to start your subscription.",
        "send_failed": "The confirmation email could not be sent just now. Please try again later.",
        "confirm_subject": "Confirm your subscription to {title}",
        "confirm_intro": "Please confirm that you want to receive {title} by email.",
        "confirm_button": "Confirm subscription", "confirm_expires": "This link works for {hours} hours.",
        "confirm_ignore": "If you did not ask for this, ignore this email: nothing will happen.",
        "confirm_page": "Confirm that {email} should receive {title}.",
        "confirmed": "Subscribed. The next issue will reach {email}.",
        "already": "This link was already used; nothing changed.",
        "expired": "This link has expired. Subscribe again to get a new one.",
        "invalid_link": "This link is not valid. Use the latest link we sent, or subscribe again.",
        "unsubscribed_since": "You unsubscribed after this link was sent, so it no longer subscribes you. "
                              "Subscribe again if you want the email back.",
        "suppressed": "We no longer send email to this address.",
        "unsubscribe_title": "Unsubscribe", "unsubscribe_question": "Stop sending {title} to {email}?",
        "unsubscribe_button": "Unsubscribe",
        "unsubscribed": "Unsubscribed: {email} will get no more email from {title}.",
        "preferences_title": "Your subscription", "delivery": "Delivery",
        "by_email": "Email (and feeds)", "feeds_only": "Feeds only: no email",
        "save": "Save", "saved": "Saved.", "opml_chosen": "OPML of the chosen tags",
        "now_feeds_only": "You get no email now. Follow the chosen tags in your feed reader:",
        "status_active": "{email} receives the weekly email.",
        "status_inactive": "{email} receives no email.",
        "bad_form": "This form expired or did not come from this site. Reload the page and try again.",
        "bad_email": "That is not an email address.", "manage": "Change your tags",
        "back": "Back to the feeds", "not_found": "Not found.",
    },
    "zh": {
        "subscribe_title": "邮件订阅", "email": "邮箱地址", "name": "称呼（可选）",
        "choose_tags": "标签", "none_means_all": "不勾选任何标签 = 接收全部标签。", "subscribe_button": "订阅",
        "check_inbox": "还差一步：如果 {email} 能收到我们的邮件，确认链接已在路上。请在 {hours} 小时内打开它以开始订阅。",
        "send_failed": "暂时无法发送确认邮件，请稍后再试。",
        "confirm_subject": "请确认订阅 {title}",
        "confirm_intro": "请确认你希望通过邮件接收 {title}。",
        "confirm_button": "确认订阅", "confirm_expires": "此链接在 {hours} 小时内有效。",
        "confirm_ignore": "如果不是你本人的请求，请忽略此邮件，不会有任何变化。",
        "confirm_page": "确认让 {email} 接收 {title}。",
        "confirmed": "订阅成功。下一期将发送到 {email}。",
        "already": "此链接已使用过，没有任何变化。",
        "expired": "此链接已过期。请重新订阅以获取新链接。",
        "invalid_link": "此链接无效。请使用我们最新发送的链接，或重新订阅。",
        "unsubscribed_since": "你在此链接发出后已退订，因此它不会再为你订阅。如需再次接收邮件，请重新订阅。",
        "suppressed": "我们不再向此地址发送邮件。",
        "unsubscribe_title": "退订", "unsubscribe_question": "不再向 {email} 发送 {title}？",
        "unsubscribe_button": "退订",
        "unsubscribed": "已退订：{email} 将不再收到 {title} 的邮件。",
        "preferences_title": "你的订阅", "delivery": "接收方式",
        "by_email": "邮件（及订阅源）", "feeds_only": "仅订阅源：不收邮件",
        "save": "保存", "saved": "已保存。", "opml_chosen": "所选标签的 OPML",
        "now_feeds_only": "你现在不会收到邮件。请在阅读器中订阅所选标签：",
        "status_active": "{email} 会收到每周邮件。",
        "status_inactive": "{email} 不会收到邮件。",
        "bad_form": "此表单已过期或并非来自本站。请刷新页面后重试。",
        "bad_email": "这不是一个邮箱地址。", "manage": "更改标签",
        "back": "返回订阅源", "not_found": "未找到。",
    },
}


def web_labels(language: str) -> dict[str, str]:
    """Page and confirmation-email words for a BCP 47 tag: :func:`render.labels_for` plus the web app's own."""
    primary = language.split("-")[0].lower()
    return {**labels_for(language), **WEB_LABELS.get(primary, WEB_LABELS["en"])}


class Csrf:
    """Signed double-submit CSRF tokens.

    Args:
        key: the site's signing key.
        clock: aware current time.
    """

    def __init__(self, key: str, clock: Clock) -> None:
        self.serializer = URLSafeSerializer(key, salt="newsletter.csrf")
        self.clock = clock

    @staticmethod
    def _bind(cookie: str) -> str:
        return hashlib.sha256(cookie.encode()).hexdigest()[:32]

    def token(self, form: str, subject: str, cookie: str) -> str:
        """A token for ``form`` (e.g. ``"subscribe"``), ``subject`` (address or ``""``) and the cookie value."""
        return self.serializer.dumps([form, subject.lower(), int(self.clock().timestamp()), self._bind(cookie)])

    def check(self, token: str, form: str, subject: str, cookie: str) -> bool:
        """True when the token was made here for this form, subject and cookie within 12 hours."""
        if not token or not cookie:
            return False
        try:
            value = self.serializer.loads(token)
        except BadSignature:
            return False
        if not isinstance(value, list) or len(value) != 4:
            return False
        f, s, t, bound = value
        if not isinstance(t, int) or not isinstance(bound, str):
            return False
        age = self.clock().timestamp() - t
        return (f == form and s == subject.lower() and -300 <= age <= CSRF_MAX_AGE_SECONDS
                and hmac.compare_digest(bound, self._bind(cookie)))


def create_app(config: Config, clock: Clock = utcnow,
               transport_factory: Optional[Callable[[], Transport]] = None) -> Flask:
    """The WSGI application for one configuration.

    Args:
        config: the configuration; the signing key is read now from ``[site] secret_key_env``.
        clock: returns the aware current time (tests pass a fixed or moving clock).
        transport_factory: makes the transport for confirmation emails (default: the
            configured one); the transport is closed after each email.

    Returns:
        A :class:`flask.Flask` app (``app.wsgi_app`` for any WSGI server).

    Raises:
        ConfigError: the signing key variable is unset, or ``[email] from`` is invalid.
    """
    from .message import parse_sender

    key = config.secret(config.site.secret_key_env, "[site] secret_key_env")
    parse_sender(config.email.sender)
    links = Links(config, key)
    csrf = Csrf(key, clock)
    renderer = Renderer(config)
    labels = web_labels(config.site.language)
    make = transport_factory or (lambda: make_transport(config))
    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = 5 * 1024 * 1024
    app_parts = urlsplit(config.site.app_url)

    def store() -> Store:
        return Store(config.store_path)

    def page(template: str, http_status: int = 200, **ctx) -> Response:
        body = renderer.template(template).render(site=renderer.site, labels=labels, **ctx)
        resp = Response(body, status=http_status, mimetype="text/html")
        resp.headers["Cache-Control"] = "no-store"
        return resp

    def notice(text: str, http_status: int = 200, title: str = "", links_: Optional[list] = None) -> Response:
        return page("notice.html.j2", http_status, title=title or config.site.title, text=text, links=links_ or [])

    def cookie_value() -> tuple[str, bool]:
        value = request.cookies.get(CSRF_COOKIE, "")
        if len(value) >= 16:
            return value, False
        return secrets.token_urlsafe(18), True

    def with_cookie(resp: Response, value: str, new: bool) -> Response:
        if new:
            secure = request.is_secure or (app_parts.scheme == "https" and request.host == app_parts.netloc)
            resp.set_cookie(CSRF_COOKIE, value, httponly=True, samesite="Lax", secure=secure,
                            max_age=CSRF_MAX_AGE_SECONDS)
        return resp

    def tag_choices(st: Store) -> list[dict]:
        return [{"key": t.key, "name": t.name, "slug": t.slug, "count": n}
                for t, n, _ in st.tag_counts()]

    def chosen_tags(st: Store) -> tuple[str, ...]:
        """The ticked tags that exist; none ticked means every tag."""
        known = st.tags()
        return tuple(k for k in dict.fromkeys(request.form.getlist("tag")) if k in known)

    def opml_url(slugs: list[str]) -> str:
        from urllib.parse import urlencode
        return "opml" + ("?" + urlencode([("tag", s) for s in slugs]) if slugs else "")

    @app.after_request
    def headers(resp: Response) -> Response:
        resp.headers.setdefault("Referrer-Policy", "no-referrer")
        resp.headers.setdefault("X-Content-Type-Options", "nosniff")
        if resp.mimetype == "text/html" and request.endpoint != "static_file":
            resp.headers.setdefault("X-Frame-Options", "DENY")
            resp.headers.setdefault("Content-Security-Policy",
                                    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
                                    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
        return resp

    # --- subscribe and confirm -------------------------------------------------------

    @app.route("/subscribe", methods=["GET", "POST"])
    def subscribe():
        cookie, new = cookie_value()
        with store() as st:
            choices = tag_choices(st)
            form = {"email": "", "name": "", "tags": []}
            error = ""
            if request.method == "POST":
                form = {"email": request.form.get("email", "")[:254], "name": request.form.get("name", "")[:100],
                        "tags": request.form.getlist("tag")}
                if not csrf.check(request.form.get("csrf", ""), "subscribe", "", request.cookies.get(CSRF_COOKIE, "")):
                    error = labels["bad_form"]
                else:
                    try:
                        sub = make_subscriber(form["email"], form["name"])
                    except ValueError:
                        error = labels["bad_email"]
                    else:
                        return with_cookie(_request_confirmation(st, sub.email, sub.name, chosen_tags(st)),
                                           cookie, new)
            status = 400 if error else 200
            resp = page("subscribe.html.j2", status, tags=choices, form=form, error=error,
                        csrf=csrf.token("subscribe", "", cookie))
        return with_cookie(resp, cookie, new)

    def _request_confirmation(st: Store, email: str, name: str, tags: tuple[str, ...]) -> Response:
        now = clock()
        done = notice(labels["check_inbox"].format(email=email, hours=CONFIRM_HOURS),
                      title=labels["subscribe_title"])
        sub = st.get_subscriber(email)
        if sub is not None and sub.status in ("bounced", "complained"):
            return done  # never mailed again; the page says the same so it reveals nothing
        claim = st.request_confirmation(email, name, tags, now, CONFIRM_INTERVAL_SECONDS)
        if claim is None:
            return done  # one confirmation per hour at most
        nonce, previous = claim
        from .optin import confirmation_message
        try:
            msg = confirmation_message(config, renderer, labels, to_addr=email, to_name=name,
                                       confirm_url=links.confirm_url(email, nonce, now),
                                       hours=CONFIRM_HOURS, now=now)
            transport = make()
            try:
                result = transport.send([msg])[0]
            finally:
                transport.close()
        except (NewsletterError, ValueError) as exc:
            app.logger.warning("confirmation to %s not sent: %s", email, exc)
            st.undo_confirmation_send(email, previous)
            return notice(labels["send_failed"], 503, title=labels["subscribe_title"])
        if result.status != "sent":
            app.logger.warning("confirmation to %s not sent: %s", email, result.error)
            st.undo_confirmation_send(email, previous)
            return notice(labels["send_failed"], 503, title=labels["subscribe_title"])
        return done

    @app.route("/confirm", methods=["GET", "POST"])
    def confirm():
        now = clock()
        token = links.read_confirm(request.args.get("t", ""), now, CONFIRM_HOURS * 3600)
        if token is None:
            return notice(labels["invalid_link"], 400)
        if token.expired:
            return notice(labels["expired"], 410, links_=[{"url": "subscribe", "text": labels["subscribe_title"]}])
        if request.method != "POST":  # GET and HEAD only show the button
            return page("confirm.html.j2", email=token.email)
        with store() as st:
            outcome = st.confirm_subscription(token.email, token.nonce, token.issued, now)
        text = labels[{"invalid": "invalid_link"}.get(outcome, outcome)].format(
            email=token.email, title=config.site.title)
        more = []
        if outcome in ("confirmed", "already"):
            more = [{"url": links.preferences_url(token.email), "text": labels["manage"]}]
        elif outcome in ("unsubscribed_since", "invalid"):
            more = [{"url": "subscribe", "text": labels["subscribe_title"]}]
        return notice(text, 200 if outcome in ("confirmed", "already") else 409, links_=more)

    # --- preferences -----------------------------------------------------------------

    @app.route("/preferences", methods=["GET", "POST"])
    def preferences():
        token = request.args.get("t", "")
        email = links.read_token("preferences", token)
        if email is None:
            return notice(labels["invalid_link"], 400)
        cookie, new = cookie_value()
        saved, error = False, ""
        with store() as st:
            if request.method == "POST":
                if not csrf.check(request.form.get("csrf", ""), "preferences", email,
                                  request.cookies.get(CSRF_COOKIE, "")):
                    error = labels["bad_form"]
                else:
                    current = st.get_subscriber(email)
                    wants_email = request.form.get("delivery") != "feeds"
                    if wants_email and (current is None or current.status == "unsubscribed"):
                        # Coming back to email is a new subscription: double opt-in again.
                        name = current.name if current else ""
                        return with_cookie(_request_confirmation(st, email, name, chosen_tags(st)), cookie, new)
                    st.update_preferences(email, chosen_tags(st), wants_email, clock())
                    saved = True
            sub = st.get_subscriber(email)
            choices = tag_choices(st)
            followed = list(sub.tags) if sub else []
            status = sub.status if sub else "unsubscribed"
            slugs = [c["slug"] for c in choices if c["key"] in followed] if followed else []
            feeds = [{"name": c["name"], "url": f"{config.site.base_url}tags/{c['slug']}.atom"}
                     for c in choices if not followed or c["key"] in followed]
            resp = page("preferences.html.j2", 400 if error else 200, email=email, tags=choices,
                        followed=followed, status=status, saved=saved, error=error,
                        csrf=csrf.token("preferences", email, cookie), opml_url=opml_url(slugs),
                        feeds=feeds, all_url=config.site.base_url + "all.atom")
        return with_cookie(resp, cookie, new)

    @app.get("/opml")
    def opml():
        wanted = request.args.getlist("tag")
        with store() as st:
            counts = st.tag_counts()
        chosen = [c for c in counts if c[0].slug in wanted] if wanted else counts
        body = opml_document(config, chosen, include_all=not wanted)
        resp = Response(body, mimetype="text/x-opml")
        resp.headers["Content-Disposition"] = 'attachment; filename="feeds.opml"'
        return resp

    # --- unsubscribe -----------------------------------------------------------------

    @app.route("/unsubscribe", methods=["GET", "POST"])
    def unsubscribe():
        email = links.read_token("unsubscribe", request.args.get("t", ""))
        if email is None:
            return notice(labels["invalid_link"], 400)
        if request.method != "POST":
            return page("unsubscribe.html.j2", email=email)
        # RFC 8058 §3.1: the POST body is "List-Unsubscribe=One-Click"; no cookie, no login.
        if request.form.get("List-Unsubscribe") != "One-Click":
            return notice(labels["invalid_link"], 400)
        with store() as st:
            st.suppress(email, "unsubscribed", clock(), "one-click")
        return notice(labels["unsubscribed"].format(email=email, title=config.site.title),
                      title=labels["unsubscribe_title"],
                      links_=[{"url": links.preferences_url(email), "text": labels["manage"]}])

    # --- webhooks --------------------------------------------------------------------

    @app.post("/webhooks/<provider>")
    def webhook(provider: str):
        from .webhooks import WebhookRefused, handle

        body = request.get_data(cache=False)
        try:
            events = handle(config, provider, request.headers, body, clock())
        except WebhookRefused as exc:
            return {"error": exc.message}, exc.status
        outcomes = {"suppressed": 0, "unchanged": 0, "duplicate": 0, "ignored": 0}
        now = clock()
        with store() as st:
            for ev in events:
                try:
                    sub = make_subscriber(ev.email)
                except ValueError:
                    outcomes["ignored"] += 1
                    continue
                outcomes[st.suppress(sub.email, ev.status, now, provider, ev.event_id, ev.detail)] += 1
        return {"events": len(events), **outcomes}, 200

    # --- the feeds directory ---------------------------------------------------------

    @app.get("/")
    def home():
        if (config.feeds.dir / "index.html").is_file():
            return send_from_directory(config.feeds.dir, "index.html")
        return redirect("subscribe")

    @app.get("/<path:filename>", endpoint="static_file")
    def static_file(filename: str):
        # Atom as application/xml: browsers then apply feed.xsl and show the explanatory page
        # (with application/atom+xml Chromium shows the source); feed readers accept both.
        mimetype = "application/xml" if filename.endswith(".atom") else None
        return send_from_directory(config.feeds.dir, filename, mimetype=mimetype)

    @app.errorhandler(404)
    def not_found(_exc):
        return notice(labels["not_found"], 404)

    @app.errorhandler(NewsletterError)
    def library_error(exc: NewsletterError):
        app.logger.error("%s", exc)  # the detail (file, key, variable names) is for the log only
        return notice(labels["send_failed"], 503)

    return app


def app_from_env() -> Flask:
    """The app for ``$NEWSLETTER_CONFIG`` (default ``newsletter.toml``), for WSGI servers:
    ``gunicorn 'newsletter.web:app_from_env()'``.

    Raises:
        ConfigError: as :func:`newsletter.config.load_config` and :func:`create_app`.
    """
    return create_app(load_config(os.environ.get("NEWSLETTER_CONFIG", "newsletter.toml")))
