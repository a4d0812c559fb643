"""The kubeconfig is loaded once at a time: the watches' threads ask for their client together, and the
kubernetes client names its temporary CA file before it has written it."""

import threading
import time
import uuid
from pathlib import Path
from typing import IO, Any

import pytest
from kubernetes.config import kube_config

from gpuwatch.sim.kubeapi import write_kubeconfig
from gpuwatch.sources.kubernetes import KubernetesSource


def _kubeconfig(path: Path, ca_pem: bytes) -> str:
    write_kubeconfig(path, server_url="https://127.0.0.1:6443", token="t", ca_pem=ca_pem)
    return str(path)


def test_threads_loading_the_same_kubeconfig_each_see_the_whole_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca_pem = f"-----BEGIN CERTIFICATE-----\n{uuid.uuid4().hex}\n-----END CERTIFICATE-----\n".encode()
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", ca_pem)

    def slow_open(name: str, mode: str = "r", *args: Any, **kwargs: Any) -> IO[Any]:
        if "w" in mode:
            time.sleep(0.3)  # the CA file is named in the client's table but not written yet
        return open(name, mode, *args, **kwargs)

    monkeypatch.setattr(kube_config, "open", slow_open, raising=False)
    sources = [KubernetesSource(kubeconfig=kubeconfig) for _ in range(4)]
    seen: list[bytes] = []
    start = threading.Barrier(len(sources))

    def load(source: KubernetesSource) -> None:
        start.wait()
        ca_file = source._client().configuration.ssl_ca_cert
        seen.append(Path(ca_file).read_bytes())

    threads = [threading.Thread(target=load, args=(s,)) for s in sources]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [ca_pem] * len(sources)


def test_threads_asking_one_source_get_one_client(tmp_path: Path) -> None:
    source = KubernetesSource(kubeconfig=_kubeconfig(tmp_path / "kubeconfig", b"ca"))
    clients: list[object] = []
    start = threading.Barrier(6)

    def ask() -> None:
        start.wait()
        clients.append(source._client())

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(clients) == 6 and len({id(c) for c in clients}) == 1
    assert source.server == "https://127.0.0.1:6443"
