"""TLS for the emulator: a certificate authority and a server certificate made at start, and an AMQPS listener.

The service is reached over TLS (AMQPS on port 5671); the SDK's ``UseDevelopmentEmulator=true`` is what turns
TLS off. With ``tls=True`` the emulator makes, each time it starts, a private certificate authority and a
certificate for ``127.0.0.1`` and ``localhost`` signed by it (EC P-256, valid for 7 days; the keys never leave
memory except the server's, kept in the emulator's temporary folder), writes the authority's certificate to
``ca_file``, and serves AMQP over TLS on ``tls_port`` beside the plain port. Clients trust it by passing the file
as azure-eventhub's ``connection_verify`` (and ``custom_endpoint_address`` when the port is not 5671). With a
``websocket_port`` it also serves AMQP over secure WebSockets (``wss://HOST:PORT/$servicebus/websocket``, the
service's ``TransportType.AmqpOverWebsocket`` on port 443) with the same certificate.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import ipaddress
import ssl
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rxhubs.errors import ConfigurationError

if TYPE_CHECKING:
    from rxhubs.emulator._server import Server
    from rxhubs.emulator._websocket import WebSocketListener

__all__ = ["TlsListener", "make_certificates"]

VALIDITY = _dt.timedelta(days=7)


def make_certificates(folder: Path, ca_file: Path | None = None) -> tuple[Path, Path, Path]:
    """A new certificate authority and a server certificate for 127.0.0.1/localhost signed by it.

    Returns:
        The authority's certificate (PEM, at ``ca_file`` or in ``folder``), the server's certificate chain and
        its key (in ``folder``).

    Raises:
        ConfigurationError: ``cryptography`` is not installed.
    """
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:  # pragma: no cover - an install without the extra
        raise ConfigurationError("the emulator's TLS needs cryptography: pip install 'rxhubs[tls]'") from exc
    now = _dt.datetime.now(_dt.UTC) - _dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rxhubs emulator local CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                    x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_path = ca_file or folder / "ca.pem"
    ca_path.parent.mkdir(parents=True, exist_ok=True)
    ca_path.write_bytes(ca.public_bytes(pem))
    cert_path, key_path = folder / "server.pem", folder / "server.key"
    cert_path.write_bytes(server.public_bytes(pem) + ca.public_bytes(pem))
    key_path.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    key_path.chmod(0o600)
    return ca_path, cert_path, key_path


class TlsListener:
    """AMQP over TLS: the same connections as the plain port, behind a TLS server socket."""

    def __init__(self, ca_file: str | Path | None = None, websocket_port: int | None = None) -> None:
        if websocket_port is not None and not 0 <= websocket_port <= 65535:
            raise ConfigurationError(f"tls_websocket_port must be between 0 and 65535 or None, got {websocket_port}")
        self.ca_file: Path | None = Path(ca_file) if ca_file is not None else None
        self.port: int | None = None
        self._requested_websocket_port = websocket_port
        self.websocket_port: int | None = None  # AMQP over secure WebSockets (wss://), when asked
        self._websocket: WebSocketListener | None = None
        self._server: asyncio.Server | None = None
        self.context: ssl.SSLContext | None = None  # the server side, also for the Schema Registry's HTTPS
        self._folder: tempfile.TemporaryDirectory[str] | None = None

    async def start(self, server: Server, host: str, port: int) -> int:
        """Make the certificates and listen on ``port`` (0: a free one); return the port."""
        self._folder = tempfile.TemporaryDirectory(prefix="rxhubs-emulator-tls-")
        folder = Path(self._folder.name)
        ca, cert, key = await asyncio.to_thread(make_certificates, folder, self.ca_file)
        self.ca_file = ca
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert, key)
        self.context = context
        self._server = await asyncio.start_server(server.serve_connection, host, port, ssl=context, limit=2**16)
        self.port = int(self._server.sockets[0].getsockname()[1])
        if self._requested_websocket_port is not None:
            from rxhubs.emulator._websocket import WebSocketListener

            self._websocket = WebSocketListener(server)
            self.websocket_port = await self._websocket.start(host, self._requested_websocket_port, context)
        return self.port

    async def stop(self) -> None:
        websocket, self._websocket = self._websocket, None
        if websocket is not None:
            websocket.stop_accepting()
            await websocket.stop()
        self.websocket_port = None
        server, self._server = self._server, None
        if server is not None:
            server.close()
            try:
                await asyncio.wait_for(server.wait_closed(), 2.0)
            except (TimeoutError, Exception):
                pass
        folder, self._folder = self._folder, None
        if folder is not None:
            folder.cleanup()

    def options(self, port: int) -> dict[str, Any]:
        """What to pass to the azure-eventhub clients: ``connection_verify`` and the endpoint when not 5671."""
        out: dict[str, Any] = {"connection_verify": str(self.ca_file)}
        if port != 5671:
            out["custom_endpoint_address"] = f"sb://127.0.0.1:{port}"
        return out
