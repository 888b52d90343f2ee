"""pqlab.net.inventory and the host options: Ansible inventories (INI and YAML), variable
precedence, host patterns and pairs, `[user@]host[:port]`, and SSH options passed on or
refused (never silently dropped)."""

from __future__ import annotations

import pytest

from pqlab.errors import UserError
from pqlab.net import inventory
from pqlab.net.remote import (
    HostPair,
    pairs_from_inventory,
    parse_host,
    parse_ssh_args,
    spec_from_inventory,
)

INI = """
# regions of the trial
lab ansible_connection=local

[tokyo]
tk1 ansible_host=10.0.1.1
tk2:2222 ansible_host=10.0.1.2 pqlab_tls_address=172.16.1.2

[frankfurt]
fra[01:03].example ansible_user=admin

[asia:children]
tokyo

[asia:vars]
ansible_user=ubuntu
ansible_ssh_common_args='-o ProxyJump=jump@bastion:22 -o UserKnownHostsFile=/etc/pqlab/known_hosts'

[tokyo:vars]
ansible_ssh_private_key_file=~/.ssh/tokyo
ansible_user=tokyo-user

[all:vars]
ansible_user=everyone
ansible_port=22
"""

YAML = """
all:
  vars:
    ansible_user: everyone
    ansible_port: 22
  hosts:
    lab:
      ansible_connection: local
  children:
    asia:
      vars:
        ansible_user: ubuntu
        ansible_ssh_common_args: -o ProxyJump=jump@bastion:22 -o UserKnownHostsFile=/etc/pqlab/known_hosts
      children:
        tokyo:
          vars:
            ansible_ssh_private_key_file: ~/.ssh/tokyo
            ansible_user: tokyo-user
          hosts:
            tk1:
              ansible_host: 10.0.1.1
            tk2:
              ansible_host: 10.0.1.2
              ansible_port: 2222
              pqlab_tls_address: 172.16.1.2
    frankfurt:
      hosts:
        fra[01:03].example:
          ansible_user: admin
"""


@pytest.fixture(params=["ini", "yaml"])
def inv(request, tmp_path):
    path = tmp_path / ("hosts.ini" if request.param == "ini" else "hosts.yml")
    path.write_text(INI if request.param == "ini" else YAML)
    return inventory.load(path)


def test_hosts_groups_and_ranges(inv):
    assert set(inv.hosts) == {
        "lab",
        "tk1",
        "tk2",
        "fra01.example",
        "fra02.example",
        "fra03.example",
    }
    assert inv.resolve("tokyo") == ["tk1", "tk2"]
    assert inv.resolve("asia") == ["tk1", "tk2"]  # through its child group
    assert inv.resolve("frankfurt") == ["fra01.example", "fra02.example", "fra03.example"]
    assert inv.resolve("tk2") == ["tk2"]
    assert len(inv.resolve("all")) == 6
    with pytest.raises(UserError, match="neither a group nor a host"):
        inv.resolve("osaka")


def test_variable_precedence(inv):
    # host > child group (tokyo) > parent group (asia) > all
    tk2 = inv.host_vars("tk2")
    assert tk2["ansible_user"] == "tokyo-user"
    assert tk2["ansible_port"] == "2222"  # the host's own (host:port or a host var)
    assert tk2["ansible_ssh_private_key_file"] == "~/.ssh/tokyo"
    assert "ProxyJump=jump@bastion:22" in tk2["ansible_ssh_common_args"]
    assert inv.host_vars("fra02.example")["ansible_user"] == "admin"
    assert inv.host_vars("lab")["ansible_user"] == "everyone"
    assert inv.host_vars("tk1")["ansible_port"] == "22"


def test_specs_from_inventory(inv):
    tk2 = spec_from_inventory(inv, "tk2")
    assert (tk2.host, tk2.port, tk2.user, tk2.tls_address) == (
        "10.0.1.2",
        2222,
        "tokyo-user",
        "172.16.1.2",
    )
    opts = tk2.options(("/tmp/ssh_config",)).kwargs()
    assert opts["tunnel"] == "jump@bastion:22"
    assert opts["known_hosts"] == "/etc/pqlab/known_hosts"
    assert opts["client_keys"][0].endswith("/.ssh/tokyo")
    assert opts["port"] == 2222 and opts["username"] == "tokyo-user"
    assert opts["config"] == ["/tmp/ssh_config"]
    lab = spec_from_inventory(inv, "lab")
    assert lab.local and lab.host is None


def test_pairs(inv, tmp_path):
    path = tmp_path / "inv.ini"
    path.write_text(INI)
    pairs = pairs_from_inventory(str(path), ["lab:tokyo", "tokyo:frankfurt", "tokyo:tokyo"])
    labels = [p.label for p in pairs]
    assert labels[:2] == ["local->tk1", "local->tk2"]
    assert "tk1->fra01.example" in labels and "tk2->fra03.example" in labels
    assert "tk1->tk2" in labels and "tk2->tk1" in labels
    assert not any(p.client.name == p.server.name for p in pairs)  # never a host with itself
    assert len(labels) == 2 + 6 + 2
    with pytest.raises(UserError, match="CLIENTS:SERVERS"):
        pairs_from_inventory(str(path), ["tokyo"])
    with pytest.raises(UserError, match="needs --pairs"):
        pairs_from_inventory(str(path), [])
    with pytest.raises(UserError, match="no pair of two different hosts"):
        pairs_from_inventory(str(path), ["tk1:tk1"])


@pytest.mark.parametrize(
    "text, bad",
    [
        ("[tokyo\nh1\n", "header"),
        ("[g:vars]\nnovalue\n", "key=value"),
        ("h1 ansible_port\n", "key=value"),
        ("web[05:01]\n", "backwards"),
        ("h1 'unterminated\n", "quotation"),
    ],
)
def test_ini_errors_name_the_line(tmp_path, text, bad):
    path = tmp_path / "bad.ini"
    path.write_text(text)
    with pytest.raises(UserError, match=bad):
        inventory.load(path)


def test_yaml_errors(tmp_path):
    path = tmp_path / "bad.yml"
    path.write_text("all:\n  hostz:\n    h1:\n")
    with pytest.raises(UserError, match="hosts, vars and children"):
        inventory.load(path)
    path.write_text("all: [1, 2\n")
    with pytest.raises(UserError, match="not valid YAML"):
        inventory.load(path)


def test_empty_or_missing_inventory(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        inventory.load(tmp_path / "none.ini")
    (tmp_path / "empty.ini").write_text("# nothing\n[g]\n")
    with pytest.raises(UserError, match="names no hosts"):
        inventory.load(tmp_path / "empty.ini")


@pytest.mark.parametrize(
    "text, want",
    [
        ("root@10.0.0.2", ("root", "10.0.0.2", None)),
        ("ubuntu@server.example:2222", ("ubuntu", "server.example", 2222)),
        ("server", (None, "server", None)),
        ("root@[2001:db8::2]:22", ("root", "2001:db8::2", 22)),
        ("a_b@h-1.x", ("a_b", "h-1.x", None)),
    ],
)
def test_parse_host(text, want):
    spec = parse_host(text)
    assert (spec.user, spec.host, spec.port) == want
    assert spec.name == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "root@",
        "@host",
        "root@host:",
        "root@host:70000",
        "root@host:0",
        "root@ho st",
        "root@host;rm",
        "user@@host",
        "root@-host",
    ],
)
def test_parse_host_refuses(text):
    with pytest.raises(UserError, match="--server-host|port"):
        parse_host(text)


def test_ssh_args():
    args = parse_ssh_args("-o ProxyJump=j@b -oIdentitiesOnly=yes -i ~/.ssh/k -p 2200 -J x", "w")
    assert args == (
        ("ProxyJump", "j@b"),
        ("IdentitiesOnly", "yes"),
        ("IdentityFile", "~/.ssh/k"),
        ("Port", "2200"),
        ("ProxyJump", "x"),
    )
    with pytest.raises(UserError, match="not supported"):
        parse_ssh_args("-A", "w")
    with pytest.raises(UserError, match="needs a value"):
        parse_ssh_args("-o", "w")


def test_host_key_checking_cannot_be_turned_off(tmp_path):
    path = tmp_path / "i.ini"
    path.write_text("h1 ansible_ssh_common_args='-o StrictHostKeyChecking=no'\n")
    spec = spec_from_inventory(inventory.load(path), "h1")
    with pytest.raises(UserError, match="always checks host keys"):
        spec.options(())
    path.write_text("h1 ansible_ssh_common_args='-o ForwardAgent=yes'\n")
    spec = spec_from_inventory(inventory.load(path), "h1")
    with pytest.raises(UserError, match="not supported by pqlab"):
        spec.options(())


def test_pair_labels():
    a, b = parse_host("root@a"), parse_host("root@b")
    assert HostPair(None, b).label == "local->root@b"
    assert HostPair(a, b).label == "root@a->root@b"
    assert HostPair(a, b).side("client") is a


def test_a_configuration_without_known_hosts_is_refused(tmp_path):
    """`UserKnownHostsFile none` would make asyncssh skip the host-key check: refused
    before any connection is attempted (port 9 on loopback would only refuse)."""
    from pqlab.net import ssh

    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host *\n  UserKnownHostsFile none\n")
    conn = ssh.Connection(ssh.SshOptions(host="127.0.0.1", port=9, config=(str(cfg),)), "h")
    with pytest.raises(UserError, match="turns host-key checking off"):
        conn.open()
