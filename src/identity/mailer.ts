import nodemailer, { type Transporter } from 'nodemailer';
import type { Logger } from '../shared/logger.js';
import { uuidv7 } from '../shared/ids.js';
import type { IdentityStore, Q } from './store.js';

export type EmailKind = 'email_verification' | 'password_reset' | 'invitation';

export interface OutgoingEmail {
  kind: EmailKind;
  to: string;
  subject: string;
  body: string;
  /** The action link (logged when no SMTP server is configured). */
  link: string;
}

/**
 * Email goes through the email_outbox table (written in the caller's transaction when given) and a
 * sender loop delivers it: through nodemailer when SMTP_URL is set, else the link is logged (info)
 * so a self-hosted operator without mail can still complete the flow.
 */
export class Mailer {
  private transport: Transporter | null;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;

  constructor(
    private readonly store: IdentityStore,
    private readonly o: { smtpUrl: string | undefined; from: string; logger: Logger; intervalMs?: number },
  ) {
    this.transport = o.smtpUrl ? nodemailer.createTransport(o.smtpUrl) : null;
  }

  async enqueue(m: OutgoingEmail, q?: Q): Promise<void> {
    await this.store.enqueueEmail({ id: uuidv7(), kind: m.kind, to: m.to, subject: m.subject, body: m.body, now: new Date() }, q);
    if (!this.transport) this.o.logger.info({ email_kind: m.kind, to: m.to, link: m.link }, 'email (no SMTP_URL configured): follow the link');
    this.kick();
  }

  start(): void {
    this.stopped = false;
    this.timer = setInterval(() => this.kick(), this.o.intervalMs ?? 5000);
    this.timer.unref();
  }

  /** Runs one delivery pass soon (coalesced with a pass already running). */
  kick(): void {
    if (this.stopped || this.running) return;
    this.running = this.deliverDue()
      .then(() => undefined)
      .catch((e: unknown) => this.o.logger.warn({ err: e }, 'email outbox pass failed'))
      .finally(() => {
        this.running = null;
      });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
    this.transport?.close();
  }

  /** One pass: claims due messages and sends (or, without SMTP, marks them delivered to the log). */
  async deliverDue(): Promise<number> {
    const now = new Date();
    const batch = await this.store.claimEmails(now, 20, 120);
    let sent = 0;
    for (const m of batch) {
      try {
        if (this.transport) await this.transport.sendMail({ from: this.o.from, to: m.to_address, subject: m.subject, text: m.body_text });
        await this.store.markEmailSent(m.id, new Date());
        sent++;
      } catch (e) {
        const backoffS = Math.min(3600, 30 * 2 ** Math.max(0, m.attempts - 1));
        this.o.logger.warn({ err: e, email_kind: m.email_kind, attempts: m.attempts }, 'email delivery failed; will retry');
        await this.store.markEmailFailed(m.id, (e as Error).message ?? String(e), new Date(Date.now() + backoffS * 1000));
      }
    }
    return sent;
  }
}
