"""HTTPS for the direct server: the App's files and its WebSocket over TLS (settings ``tls_cert``, ``tls_key``).

A browser gives a page a service worker, and so Web Push, only in a secure context: HTTPS or
``localhost``. With a certificate the phone trusts for the name it opens (``tailscale cert``, an
ACME client, a company CA), the direct server itself serves ``https://`` and ``wss://``; behind a
reverse proxy that ends TLS, leave these unset and list the proxy's name in ``allowed_hosts``.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from ...errors import ConfigError


def certificate_names(cert: Path) -> list[str]:
    """The DNS names the certificate ``cert`` (its first PEM block) is for, wildcards left out.

    The server may be opened by these names (they join ``allowed_hosts``), and its link uses the
    first: a browser trusts the certificate only under a name it holds.
    """
    from cryptography import x509

    try:
        certificate = x509.load_pem_x509_certificate(cert.read_bytes())
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return []
    return [name.lower() for name in names.get_values_for_type(x509.DNSName) if not name.startswith("*")]


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2 or later) with the PEM certificate chain ``cert`` and its ``key``.

    Raises ConfigError naming the setting and saying what is wrong (missing, unreadable, not PEM,
    key not matching the certificate).
    """
    for setting, path in (("tls_cert", cert), ("tls_key", key)):
        if not path.is_file():
            raise ConfigError(f"lineup setting {setting!r}: no such file {str(path)!r}")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except PermissionError as exc:
        raise ConfigError(f"lineup setting 'tls_key': cannot read {exc.filename!r} (permission denied)") from exc
    except ssl.SSLError as exc:
        mismatch = "KEY_VALUES_MISMATCH" in str(exc)
        why = "the key does not match the certificate" if mismatch else "not a PEM certificate and key"
        raise ConfigError(f"lineup settings 'tls_cert'/'tls_key': {why} ({exc.reason or exc})") from exc
    except OSError as exc:
        raise ConfigError(f"lineup settings 'tls_cert'/'tls_key': cannot load them: {exc}") from exc
    return context
