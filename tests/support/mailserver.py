"""A throwaway mail system for the email tests and benchmark: Debian's Postfix (SMTP in, relayed to
Dovecot over LMTP) and Dovecot (IMAP, LMTP, and SASL for Postfix), each with a config directory of its
own, on loopback ports, with users in a passwd-file; and a person on it, who sends with aiosmtplib and
reads their mailbox with the stdlib's imaplib, as a person's mail client would."""

from __future__ import annotations

import asyncio
import email
import email.policy
import imaplib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import aiosmtplib
import pytest
from ngircd import REPLY_TIMEOUT, free_port, until_listening, wait_for

POSTFIX = "/usr/sbin/postfix"
DOVECOT = "/usr/sbin/dovecot"
DOMAIN = "mail.test"
PASSWORD = "mail-secret"
MASTER_CF = """\
{listen} inet n - n - - smtpd
pickup unix n - n 60 1 pickup
cleanup unix n - n - 0 cleanup
qmgr unix n - n 300 1 qmgr
rewrite unix - - n - - trivial-rewrite
bounce unix - - n - 0 bounce
defer unix - - n - 0 bounce
trace unix - - n - 0 bounce
verify unix - - n - 1 verify
flush unix n - n 1000? 0 flush
proxymap unix - - n - - proxymap
smtp unix - - n - - smtp
relay unix - - n - - smtp
showq unix n - n - - showq
error unix - - n - - error
retry unix - - n - - error
discard unix - - n - - discard
lmtp unix - - n - - lmtp
anvil unix - - n - 1 anvil
scache unix - - n - 1 scache
postlog unix-dgram n - n - 1 postlogd
"""


class MailServer:
    """Postfix accepts mail for mail.test on one loopback port (relaying only for SASL-authenticated
    senders, and never off the machine) and hands it to Dovecot's LMTP, which files it in Maildirs that
    Dovecot's IMAP serves (IDLE included). Plain authentication without TLS: loopback only."""

    def __init__(self) -> None:
        for program, package in ((POSTFIX, "postfix"), (DOVECOT, "dovecot-imapd")):
            if shutil.which(program) is None:
                pytest.skip(f"{package} is not installed (setup.sh installs it: apt-get install {package})")
        if os.geteuid() != 0:
            pytest.skip("Postfix's master and Dovecot start as root (they drop to their own users)")
        self.dir = Path(tempfile.mkdtemp(prefix="hermetic-mail-"))
        self.dir.chmod(0o755)  # Dovecot's login processes (dovenull) reach its run directory
        self.smtp_port, self.imap_port, self.lmtp_port, self.auth_port = (free_port() for _ in range(4))
        self.users = self.dir / "users"
        self.users.write_text("")
        self.procs: list[subprocess.Popen[str]] = []
        try:
            self._start_dovecot()
            self._start_postfix()
        except BaseException:
            self.close()
            raise

    def _start_dovecot(self) -> None:
        mail = self.dir / "mail"
        mail.mkdir()
        nobody = pwd.getpwnam("nobody")
        os.chown(mail, nobody.pw_uid, nobody.pw_gid)
        config = self.dir / "dovecot.conf"
        config.write_text(
            f"base_dir = {self.dir}/dovecot-run\nstate_dir = {self.dir}/dovecot-state\n"
            f"log_path = {self.dir}/dovecot.log\nssl = no\nlisten = 127.0.0.1\nprotocols = imap lmtp\n"
            "disable_plaintext_auth = no\nauth_mechanisms = plain login\nauth_failure_delay = 0\n"
            f"mail_location = maildir:{mail}/%u\n"
            f"passdb {{\n  driver = passwd-file\n  args = scheme=PLAIN {self.users}\n}}\n"
            f"userdb {{\n  driver = static\n  args = uid=nobody gid=nogroup home={mail}/%u\n}}\n"
            f"service imap-login {{\n  inet_listener imap {{\n    port = {self.imap_port}\n  }}\n"
            "  inet_listener imaps {\n    port = 0\n  }\n}\n"
            f"service lmtp {{\n  inet_listener lmtp {{\n    port = {self.lmtp_port}\n  }}\n}}\n"
            f"service auth {{\n  inet_listener {{\n    port = {self.auth_port}\n  }}\n}}\n"
            f"protocol lmtp {{\n  postmaster_address = postmaster@{DOMAIN}\n}}\n"
        )
        proc = subprocess.Popen(
            [DOVECOT, "-F", "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.procs.append(proc)
        for port in (self.imap_port, self.lmtp_port, self.auth_port):
            until_listening(proc, port, "dovecot", lambda: None)

    def _start_postfix(self) -> None:
        config, data = self.dir / "postfix", self.dir / "data"
        for directory in (config, self.dir / "queue", data):
            directory.mkdir()
        postfix = pwd.getpwnam("postfix")
        os.chown(data, postfix.pw_uid, postfix.pw_gid)
        (config / "master.cf").write_text(MASTER_CF.format(listen=f"127.0.0.1:{self.smtp_port}"))
        (config / "main.cf").write_text(
            f"compatibility_level = 3.6\nqueue_directory = {self.dir}/queue\n"
            f"data_directory = {self.dir}/data\nmaillog_file = {self.dir}/maillog\n"
            f"maillog_file_prefixes = {self.dir}\n"
            f"myhostname = {DOMAIN}\nmydomain = {DOMAIN}\nmyorigin = {DOMAIN}\nmydestination =\n"
            "inet_interfaces = 127.0.0.1\ninet_protocols = ipv4\nmynetworks = 127.0.0.1/32\n"
            "alias_maps =\nalias_database =\nlocal_recipient_maps =\nbiff = no\nnotify_classes =\n"
            f"relay_domains = {DOMAIN}\nrelay_transport = lmtp:inet:127.0.0.1:{self.lmtp_port}\n"
            "default_transport = error:this test server sends no mail off the machine\n"
            "smtp_dns_support_level = disabled\nlmtp_dns_support_level = disabled\n"
            "smtpd_relay_restrictions = permit_sasl_authenticated, reject_unauth_destination\n"
            "smtpd_sasl_auth_enable = yes\nsmtpd_sasl_type = dovecot\n"
            f"smtpd_sasl_path = inet:127.0.0.1:{self.auth_port}\nsmtpd_tls_security_level = none\n"
            "queue_run_delay = 1s\nminimal_backoff_time = 1s\nmaximal_backoff_time = 2s\n"
        )
        subprocess.run(
            [POSTFIX, "-c", str(config), "check"], check=True, capture_output=True, text=True, timeout=60
        )
        proc = subprocess.Popen(
            [POSTFIX, "-c", str(config), "start-fg"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.procs.append(proc)
        until_listening(proc, self.smtp_port, "postfix", lambda: None)

    def add_user(self, name: str) -> str:
        """An account `name@mail.test` with PASSWORD (a line in Dovecot's passwd-file); its address."""
        address = f"{name}@{DOMAIN}"
        with self.users.open("a") as users:
            users.write(f"{address}:{{PLAIN}}{PASSWORD}\n")
        # Dovecot reads a changed passwd-file at most once a second: until it has, the user is unknown
        wait_for(lambda: self._doveadm("auth", "lookup", address).returncode == 0, 30)
        return address

    def _doveadm(self, *args: str) -> subprocess.CompletedProcess[str]:
        config = str(self.dir / "dovecot.conf")
        return subprocess.run(["doveadm", "-c", config, *args], capture_output=True, text=True, timeout=30)

    def kick(self, address: str) -> None:
        """End every IMAP session of `address` (Dovecot's doveadm kick), as a server restart would."""
        kicked = self._doveadm("kick", address)
        assert kicked.returncode == 0, kicked.stderr

    def log(self) -> str:
        """What Postfix and Dovecot logged (for a failing test's output)."""
        return "\n".join(
            path.read_text(errors="replace")[-4000:]
            for path in (self.dir / "maillog", self.dir / "dovecot.log")
            if path.exists()
        )

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def mail_server() -> Iterator[MailServer]:
    server = MailServer()
    yield server
    server.close()


class MailUser:
    """A person with an account: sends mail over SMTP and reads their INBOX over IMAP."""

    def __init__(self, server: MailServer, name: str) -> None:
        self.server = server
        self.address = server.add_user(name)
        self.seen = 0

    def send(self, message: EmailMessage | bytes, to: str = "") -> None:
        """Hand a mail to Postfix (as bytes: sent as they are, to `to`), From this user unless it says
        otherwise; the envelope's sender is this user."""
        if isinstance(message, EmailMessage):
            for name, value in (
                ("From", self.address), ("Date", email.utils.formatdate()),
                ("Message-ID", email.utils.make_msgid(domain=DOMAIN)),
            ):  # fmt: skip
                if name not in message:
                    message[name] = value
        recipients = [to] if to else None
        asyncio.run(
            aiosmtplib.send(
                message, hostname="127.0.0.1", port=self.server.smtp_port, sender=self.address,
                recipients=recipients, start_tls=False, use_tls=False,
            )
        )  # fmt: skip

    def write(self, to: str, subject: str, text: str, **headers: str) -> EmailMessage:
        """A plain-text mail to `to`, sent; the message (its Message-ID set)."""
        message = EmailMessage()
        message["To"], message["Subject"] = to, subject
        for name, value in headers.items():
            message[name.replace("_", "-")] = value
        message.set_content(text)
        self.send(message)
        return message

    def inbox(self) -> list[EmailMessage]:
        """Every message in the INBOX, oldest first."""
        with imaplib.IMAP4("127.0.0.1", self.server.imap_port, timeout=30) as imap:
            imap.login(self.address, PASSWORD)
            imap.select("INBOX", readonly=True)
            _, found = imap.uid("SEARCH", "ALL")
            messages = []
            for uid in found[0].split():
                _, data = imap.uid("FETCH", uid, "(BODY.PEEK[])")
                raw = next(part[1] for part in data if isinstance(part, tuple))
                messages.append(email.message_from_bytes(raw, policy=email.policy.default))
            return messages  # type: ignore[return-value]

    def receive(self, count: int = 1, timeout: float = REPLY_TIMEOUT) -> list[EmailMessage]:
        """The next `count` messages that arrive (after those already received)."""
        deadline = time.monotonic() + timeout
        while len(messages := self.inbox()) < self.seen + count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(messages) - self.seen} of {count} mails arrived:\n{self.server.log()}"
                )
            time.sleep(0.1)
        new, self.seen = messages[self.seen : self.seen + count], self.seen + count
        return new


def text_of(message: EmailMessage, kind: str = "plain") -> str:
    """The text/`kind` body of a message (of its multipart/alternative)."""
    part = message.get_body(preferencelist=(kind,))
    assert part is not None, f"no text/{kind} part in {message}"
    return str(part.get_content()).replace("\r\n", "\n")


def email_config(server: MailServer, address: str, **extra: Any) -> dict[str, Any]:
    """The gateway's `email:` settings for a bot account on this server."""
    return {
        "address": address,
        "password": PASSWORD,
        "imap_host": "127.0.0.1",
        "imap_port": server.imap_port,
        "imap_security": "none",
        "smtp_host": "127.0.0.1",
        "smtp_port": server.smtp_port,
        "smtp_security": "none",
    } | extra
