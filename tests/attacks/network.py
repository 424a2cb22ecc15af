# Reach the test's listeners on this machine: TCP and UDP on 127.0.0.1, a Unix socket by path and
# an abstract Unix socket. The listeners must see nothing. The base is the stub.
import socket as _socket

_NOTE = ("qkvrt %s from a submission" % _RT["run"]).encode()


def _try_network():
    attempts = [
        ("tcp", lambda: _socket.create_connection(("127.0.0.1", _RT["tcp_port"]), timeout=1.0)),
        ("unix", lambda: _unix(_RT["unix_path"])),
        ("abstract", lambda: _unix("\0" + _RT["abstract_name"])),
    ]
    for kind, connect in attempts:
        try:
            connection = connect()
            try:
                connection.sendall(_NOTE)
            finally:
                connection.close()
            _hole("%s connection to the test's listener succeeded" % kind)
        except Exception as exc:
            print("note: %s refused (%s)" % (kind, exc))
    try:
        udp = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
        udp.sendto(_NOTE, ("127.0.0.1", _RT["udp_port"]))
        udp.close()  # whether it arrived, only the test's listener can tell
    except Exception as exc:
        print("note: udp refused (%s)" % exc)
    try:
        raw = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        raw.close()
        _hole("socket() is allowed")
    except Exception:
        pass


def _unix(address):
    connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    connection.settimeout(1.0)
    connection.connect(address)
    return connection


_try_network()


def head_facts(t, d_k, d_v):
    _try_network()
    raise NotImplementedError()
