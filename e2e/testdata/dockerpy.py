"""docker-py (Debian's python3-docker) against the daemon under test.

Run by TestDockerPy with DOCKER_HOST set, IMG the busybox test image and
PREFIX a container-name prefix. Prints one "ok <check>" line per check and
exits non-zero at the first failure.
"""
import io
import os
import sys
import tarfile

import docker

IMG = os.environ["IMG"]
PREFIX = os.environ["PREFIX"]
client = docker.from_env(version="auto")


def check(name, cond, detail=""):
    if not cond:
        print("FAIL %s: %s" % (name, detail))
        sys.exit(1)
    print("ok " + name)


out = client.containers.run(IMG, ["echo", "hi"], remove=True)
check("run", out == b"hi\n", repr(out))

try:
    client.containers.run(IMG, ["sh", "-c", "echo oops >&2; exit 3"], name=PREFIX + "-fail")
    check("ContainerError", False, "no exception")
except docker.errors.ContainerError as e:
    check("ContainerError", e.exit_status == 3 and b"oops" in (e.stderr or b""), "%r %r" % (e.exit_status, e.stderr))
client.containers.get(PREFIX + "-fail").remove()

c = client.containers.run(IMG, ["sleep", "1000"], detach=True, name=PREFIX + "-main", labels={"e2e": "dockerpy"})
r = c.exec_run(["sh", "-c", "echo out; exit 4"])
check("exec_run", r.exit_code == 4 and r.output == b"out\n", repr(r))
r = c.exec_run(["sh", "-c", "echo $A; pwd; id -u"], environment={"A": "b"}, workdir="/tmp", user="1234")
check("exec_run options", r.exit_code == 0 and r.output == b"b\n/tmp\n1234\n", repr(r))

buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w") as tf:
    data = b"payload\n"
    info = tarfile.TarInfo("f")
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))
check("put_archive", c.put_archive("/tmp", buf.getvalue()) is True)
bits, stat = c.get_archive("/tmp/f")
with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tf:
    got = tf.extractfile("f").read()
check("get_archive", stat["name"] == "f" and stat["size"] == 8 and got == b"payload\n", "%r %r" % (stat, got))
try:
    c.get_archive("/nope")
    check("get_archive NotFound", False, "no exception")
except docker.errors.NotFound as e:
    check("get_archive NotFound", "Could not find the file /nope" in str(e), str(e))

l = client.containers.run(IMG, ["sh", "-c", "echo a; echo b >&2"], detach=True, name=PREFIX + "-logs")
res = l.wait()
check("wait", res["StatusCode"] == 0, repr(res))
# Both streams, but not their order across each other: dockerd reads the
# two pipes apart and 20.10 here logs "b" before "a" in about 40% of runs.
check("logs", sorted(l.logs().splitlines()) == [b"a", b"b"]
      and l.logs(stderr=False) == b"a\n" and l.logs(stdout=False) == b"b\n", repr(l.logs()))

try:
    client.containers.get("nope")
    check("NotFound", False, "no exception")
except docker.errors.NotFound as e:
    check("NotFound", "No such container: nope" in str(e), str(e))
try:
    client.images.get("nope-image:latest")
    check("ImageNotFound", False, "no exception")
except docker.errors.ImageNotFound:
    check("ImageNotFound", True)

rd = client.images.get_registry_data(IMG)
check("get_registry_data", rd.id.startswith("sha256:") and rd.has_platform("linux/amd64") and not rd.has_platform("linux/arm64"),
      "%r %r" % (rd.id, rd.attrs.get("Platforms")))

names = lambda cs: sorted(x.name for x in cs)
check("filter name", names(client.containers.list(filters={"name": PREFIX + "-main"})) == [PREFIX + "-main"])
check("filter label", names(client.containers.list(all=True, filters={"label": "e2e=dockerpy"})) == [PREFIX + "-main"])
check("filter status", PREFIX + "-logs" in names(client.containers.list(all=True, filters={"status": "exited"}))
      and PREFIX + "-main" not in names(client.containers.list(all=True, filters={"status": "exited"})))

c.remove(force=True)
l.remove()
print("done")
