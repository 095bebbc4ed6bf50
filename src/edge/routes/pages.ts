import { createHash } from 'node:crypto';
import type { RouteDef } from '../http.js';

/**
 * The pages the identity mails link to (`${GANTRY_PUBLIC_URL}/verify-email?token=…`,
 * `/reset-password?token=…` and `/accept-invitation?token=…`), served by the node outside /api/v1 so the flows complete without a
 * console. Each page is static: the token is read from the page's own URL by the inline script and
 * sent to the existing API endpoint, nothing from the request is reflected into the HTML, and every
 * message is written with textContent. The Content-Security-Policy allows 'self' and exactly the
 * page's inline script and style (by their sha256), no external assets.
 */

const STYLE = 'body{font-family:system-ui,sans-serif;max-width:28rem;margin:4rem auto;padding:0 1rem;color:#222}label{display:block;margin:.75rem 0 .25rem}input{width:100%;padding:.4rem;box-sizing:border-box}button{margin-top:1rem;padding:.5rem 1rem}#status{margin-top:1rem}[hidden]{display:none}';

/** The script shared by both pages: reads ?token=, posts JSON to the API, shows the outcome. */
const COMMON = `"use strict";
var token = new URLSearchParams(location.search).get("token") || "";
var statusEl = document.getElementById("status");
function show(text) { statusEl.textContent = text; }
function post(path, body) {
  return fetch(API + path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), credentials: "omit", cache: "no-store" })
    .then(function (r) { return r.json().catch(function () { return {}; }).then(function (b) { return { ok: r.ok, body: b }; }); })
    .catch(function () { return { ok: false, body: { error_message: "the server could not be reached" } }; });
}
function failure(b) { return (b && typeof b.error_message === "string") ? b.error_message : "the request failed"; }
`;

export const VERIFY_API_PATH = '/auth/email/verify';
export const LOGIN_API_PATH = '/auth/login';
export const ACCEPT_API_PATH = '/invitations/accept';
export const RESET_API_PATH = '/auth/password/reset';
export const PAIR_CONFIRM_API_PATH = '/desktop/pair/confirm';
export const ME_API_PATH = '/users/me';

function verifyScript(api: string): string {
  return `var API = ${JSON.stringify(api)};
${COMMON}
if (!token) show("This link has no token; open the link from the email again.");
else post(${JSON.stringify(VERIFY_API_PATH)}, { verification_token: token }).then(function (r) {
  show(r.ok ? "Your email address is verified. You can close this page and log in." : "Verification failed: " + failure(r.body));
});
`;
}

function resetScript(api: string): string {
  return `var API = ${JSON.stringify(api)};
${COMMON}
var form = document.getElementById("reset");
if (!token) { show("This link has no token; open the link from the email again."); form.hidden = true; }
form.addEventListener("submit", function (ev) {
  ev.preventDefault();
  var pw = document.getElementById("new_password").value;
  var again = document.getElementById("confirm_password").value;
  if (pw !== again) { show("The two passwords differ."); return; }
  var button = form.querySelector("button");
  button.disabled = true;
  show("Saving…");
  post(${JSON.stringify(RESET_API_PATH)}, { reset_token: token, new_password: pw }).then(function (r) {
    button.disabled = false;
    if (r.ok) { form.hidden = true; show("Your password is changed. You can close this page and log in."); }
    else show("Password reset failed: " + failure(r.body));
  });
});
`;
}

/** Accepting needs the invited user's session: the page logs in (email + password), then accepts with that token. */
function acceptScript(api: string): string {
  return `var API = ${JSON.stringify(api)};
${COMMON}
var form = document.getElementById("accept");
if (!token) { show("This link has no token; open the link from the email again."); form.hidden = true; }
form.addEventListener("submit", function (ev) {
  ev.preventDefault();
  var button = form.querySelector("button");
  button.disabled = true;
  show("Signing in…");
  post(${JSON.stringify(LOGIN_API_PATH)}, { email_address: document.getElementById("email_address").value, password: document.getElementById("password").value }).then(function (r) {
    if (!r.ok || !r.body || typeof r.body.access_token !== "string") { button.disabled = false; show("Sign-in failed: " + failure(r.body)); return; }
    show("Joining the team…");
    return fetch(API + ${JSON.stringify(ACCEPT_API_PATH)}, { method: "POST", headers: { "Content-Type": "application/json", "Authorization": "Bearer " + r.body.access_token }, body: JSON.stringify({ invitation_token: token }), credentials: "omit", cache: "no-store" })
      .then(function (a) { return a.json().catch(function () { return {}; }).then(function (b) { return { ok: a.ok, body: b }; }); })
      .then(function (a) {
        button.disabled = false;
        if (a.ok) { form.hidden = true; show("You joined the team. You can close this page."); }
        else show("Accepting failed: " + failure(a.body));
      }, function () { button.disabled = false; show("Accepting failed: the server could not be reached"); });
  });
});
`;
}

/**
 * Device pairing (`gantry login` prints /pair?code=…): sign in, pick the team the device acts in
 * (the only one is taken as is), confirm the code with that session.
 */
function pairScript(api: string): string {
  return `var API = ${JSON.stringify(api)};
${COMMON}
var form = document.getElementById("pair");
var code = new URLSearchParams(location.search).get("code") || "";
document.getElementById("user_code").value = code;
document.getElementById("register").href = "/register?next=" + encodeURIComponent(location.pathname + location.search);
var session = null;
function call(method, path, body, teamId) {
  var h = { "Content-Type": "application/json", "Authorization": "Bearer " + session };
  if (teamId) h["X-Team-ID"] = teamId;
  return fetch(API + path, { method: method, headers: h, body: body ? JSON.stringify(body) : undefined, credentials: "omit", cache: "no-store" })
    .then(function (a) { return a.json().catch(function () { return {}; }).then(function (b) { return { ok: a.ok, body: b }; }); })
    .catch(function () { return { ok: false, body: { error_message: "the server could not be reached" } }; });
}
function confirmWith(teamId) {
  show("Confirming…");
  return call("POST", ${JSON.stringify(PAIR_CONFIRM_API_PATH)}, { user_code: document.getElementById("user_code").value.trim() }, teamId).then(function (r) {
    if (r.ok) { form.hidden = true; show("The device is paired. You can close this page and return to the terminal."); }
    else show("Confirming failed: " + failure(r.body));
    return r.ok;
  });
}
form.addEventListener("submit", function (ev) {
  ev.preventDefault();
  var button = form.querySelector("button");
  button.disabled = true;
  var select = document.getElementById("team_id");
  if (session && !select.hidden) { confirmWith(select.value).then(function () { button.disabled = false; }); return; }
  show("Signing in…");
  post(${JSON.stringify(LOGIN_API_PATH)}, { email_address: document.getElementById("email_address").value, password: document.getElementById("password").value }).then(function (r) {
    if (!r.ok || !r.body || typeof r.body.access_token !== "string") { button.disabled = false; show("Sign-in failed: " + failure(r.body)); return; }
    session = r.body.access_token;
    return call("GET", ${JSON.stringify(ME_API_PATH)}).then(function (me) {
      var teams = (me.ok && me.body && me.body.team_list) || [];
      if (teams.length === 0) { button.disabled = false; show("This account belongs to no team."); return; }
      if (teams.length === 1) return confirmWith(teams[0].id).then(function () { button.disabled = false; });
      teams.forEach(function (t) { var o = document.createElement("option"); o.value = t.id; o.textContent = t.display_name; select.appendChild(o); });
      select.hidden = false;
      document.getElementById("team_label").hidden = false;
      button.textContent = "Confirm for this team";
      button.disabled = false;
      show("Choose the team the device acts in.");
    });
  });
});
`;
}

const sha256 = (s: string): string => `'sha256-${createHash('sha256').update(s, 'utf8').digest('base64')}'`;

interface Page {
  title: string;
  html: string;
  csp: string;
}

function page(title: string, bodyHtml: string, script: string): Page {
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${title}</title>
<style>${STYLE}</style>
</head>
<body>
<h1>${title}</h1>
${bodyHtml}
<p id="status" role="status"></p>
<script>${script}</script>
</body>
</html>
`;
  const csp = [
    "default-src 'self'",
    `script-src ${sha256(script)}`,
    `style-src ${sha256(STYLE)}`,
    "connect-src 'self'",
    "img-src 'self'",
    "form-action 'self'",
    "base-uri 'none'",
    "object-src 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  return { title, html, csp };
}

function serve(path: string, p: Page): RouteDef {
  return {
    method: 'GET',
    path,
    absolute: true,
    auth: { kinds: 'public' },
    tag: 'page',
    doc: { summary: p.title, tags: ['pages'], responses: { 200: { contentType: 'text/html' } } },
    stream: async (_c, res) => {
      res.writeHead(200, {
        'Content-Type': 'text/html; charset=utf-8',
        'Content-Security-Policy': p.csp,
        'Cache-Control': 'no-store',
        'Referrer-Policy': 'no-referrer',
        'X-Content-Type-Options': 'nosniff',
        'X-Frame-Options': 'DENY',
      });
      res.end(p.html);
    },
  };
}

/** GET /verify-email, /reset-password, /accept-invitation and /pair (device pairing); `apiBase` is the API's path prefix (/api/v1). */
export function pageRoutes(apiBase: string): RouteDef[] {
  const verify = page('Verify your email address', '<p>Verifying…</p>', verifyScript(apiBase));
  const reset = page(
    'Choose a new password',
    `<form id="reset" autocomplete="off">
<label for="new_password">New password (at least 10 characters)</label>
<input id="new_password" name="new_password" type="password" minlength="10" maxlength="256" required autocomplete="new-password">
<label for="confirm_password">Repeat the new password</label>
<input id="confirm_password" name="confirm_password" type="password" minlength="10" maxlength="256" required autocomplete="new-password">
<button type="submit">Change password</button>
</form>`,
    resetScript(apiBase),
  );
  const accept = page(
    'Join the team',
    `<p>Sign in with the account the invitation was sent to. No account yet? Register with that email address first, then open this link again.</p>
<form id="accept" autocomplete="on">
<label for="email_address">Email address</label>
<input id="email_address" name="email_address" type="email" maxlength="320" required autocomplete="username">
<label for="password">Password</label>
<input id="password" name="password" type="password" maxlength="256" required autocomplete="current-password">
<button type="submit">Sign in and join</button>
</form>`,
    acceptScript(apiBase),
  );
  const pair = page(
    'Pair a device',
    `<p>Confirm the code your terminal shows (<code>gantry login</code>) to give that device access to your team.</p>
<form id="pair" autocomplete="on">
<label for="user_code">Code</label>
<input id="user_code" name="user_code" maxlength="32" required autocomplete="off">
<label for="email_address">Email address</label>
<input id="email_address" name="email_address" type="email" maxlength="320" required autocomplete="username">
<label for="password">Password</label>
<input id="password" name="password" type="password" maxlength="256" required autocomplete="current-password">
<label id="team_label" for="team_id" hidden>Team</label>
<select id="team_id" name="team_id" hidden></select>
<button type="submit">Sign in and confirm</button>
</form>
<p>No account yet? <a id="register" href="/register">Register</a> first; you come back here, signed in, to confirm.</p>`,
    pairScript(apiBase),
  );
  return [serve('/verify-email', verify), serve('/reset-password', reset), serve('/accept-invitation', accept), serve('/pair', pair)];
}
