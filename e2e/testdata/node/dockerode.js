// dockerode (npm) against the daemon under test.
//
// Run by TestDockerode with DOCKER_HOST set, IMG the busybox test image and
// PREFIX a container-name prefix. Prints one "ok <check>" line per check and
// exits non-zero at the first failure.
"use strict";

const Docker = require("dockerode");
const tar = require("tar-stream");
const { PassThrough } = require("stream");

const IMG = process.env.IMG;
const PREFIX = process.env.PREFIX;
const docker = new Docker(); // DOCKER_HOST

function check(name, cond, detail) {
  if (!cond) {
    console.log(`FAIL ${name}: ${detail === undefined ? "" : detail}`);
    process.exit(1);
  }
  console.log("ok " + name);
}

// demux splits a non-TTY multiplexed stream (8-byte frame headers) into
// its stdout and stderr, as Buffers.
function demux(buf) {
  const out = [];
  const err = [];
  let i = 0;
  while (i + 8 <= buf.length) {
    const size = buf.readUInt32BE(i + 4);
    const payload = buf.subarray(i + 8, i + 8 + size);
    (buf[i] === 2 ? err : out).push(payload);
    i += 8 + size;
  }
  if (i !== buf.length) throw new Error(`trailing ${buf.length - i} bytes in a multiplexed stream`);
  return { stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() };
}

function collect(stream) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    stream.on("data", (c) => chunks.push(c));
    stream.on("end", () => resolve(Buffer.concat(chunks)));
    stream.on("error", reject);
  });
}

// execRun runs cmd in c and returns its demultiplexed output and exit code.
async function execRun(c, cmd, opts = {}) {
  const ex = await c.exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true, ...opts });
  const stream = await ex.start({ hijack: true, stdin: false });
  const out = new PassThrough();
  const err = new PassThrough();
  docker.modem.demuxStream(stream, out, err);
  const done = new Promise((resolve, reject) => {
    stream.on("end", resolve);
    stream.on("close", resolve);
    stream.on("error", reject);
  });
  const outP = collect(out);
  const errP = collect(err);
  await done;
  out.end();
  err.end();
  const info = await ex.inspect();
  return { stdout: (await outP).toString(), stderr: (await errP).toString(), code: info.ExitCode, running: info.Running };
}

async function expect404(name, p, wantText) {
  try {
    await p;
    check(name, false, "no error");
  } catch (e) {
    check(name, e.statusCode === 404 && String(e.message).includes(wantText), `${e.statusCode} ${e.message}`);
  }
}

async function main() {
  // run: create, start, wait, logs.
  const r = await docker.createContainer({ Image: IMG, Cmd: ["echo", "hi"], name: PREFIX + "-run" });
  await r.start();
  const rw = await r.wait();
  check("run wait", rw.StatusCode === 0, JSON.stringify(rw));
  const rl = demux(await r.logs({ stdout: true, stderr: true }));
  check("run logs", rl.stdout === "hi\n" && rl.stderr === "", JSON.stringify(rl));
  await r.remove();

  // A failing container's exit code and its stderr.
  const f = await docker.createContainer({ Image: IMG, Cmd: ["sh", "-c", "echo oops >&2; exit 3"], name: PREFIX + "-fail" });
  await f.start();
  const fw = await f.wait();
  check("failing exit code", fw.StatusCode === 3, JSON.stringify(fw));
  const fi = await f.inspect();
  check("failing inspect", fi.State.Status === "exited" && fi.State.ExitCode === 3, JSON.stringify(fi.State));
  const fl = demux(await f.logs({ stdout: true, stderr: true }));
  check("failing logs", fl.stdout === "" && fl.stderr === "oops\n", JSON.stringify(fl));
  const flo = demux(await f.logs({ stdout: false, stderr: true, tail: 1 }));
  check("logs stderr only", flo.stderr === "oops\n", JSON.stringify(flo));
  await f.remove();

  // exec, in a long-running container with a label.
  const c = await docker.createContainer({
    Image: IMG,
    Cmd: ["sleep", "1000"],
    name: PREFIX + "-main",
    Labels: { e2e: "dockerode" },
  });
  await c.start();
  let e = await execRun(c, ["sh", "-c", "echo out; echo err >&2; exit 4"]);
  check("exec", e.code === 4 && !e.running && e.stdout === "out\n" && e.stderr === "err\n", JSON.stringify(e));
  e = await execRun(c, ["sh", "-c", "echo $A; pwd; id -u"], { Env: ["A=b"], WorkingDir: "/tmp", User: "1234" });
  check("exec options", e.code === 0 && e.stdout === "b\n/tmp\n1234\n", JSON.stringify(e));

  // putArchive / getArchive.
  const pack = tar.pack();
  pack.entry({ name: "f", mode: 0o644 }, "payload\n");
  pack.finalize();
  await c.putArchive(await collect(pack), { path: "/tmp" });
  e = await execRun(c, ["cat", "/tmp/f"]);
  check("putArchive", e.code === 0 && e.stdout === "payload\n", JSON.stringify(e));
  const got = await collect(await c.getArchive({ path: "/tmp/f" }));
  const files = {};
  await new Promise((resolve, reject) => {
    const ex = tar.extract();
    ex.on("entry", (h, s, next) => {
      collect(s).then((b) => {
        files[h.name] = b.toString();
        next();
      }, reject);
    });
    ex.on("finish", resolve);
    ex.on("error", reject);
    ex.end(got);
  });
  check("getArchive", JSON.stringify(files) === JSON.stringify({ f: "payload\n" }), JSON.stringify(files));
  const st = await c.infoArchive({ path: "/tmp/f" });
  check("infoArchive", st.statusCode === 200 && st.headers["x-docker-container-path-stat"] !== undefined, JSON.stringify(st.headers));
  await expect404("getArchive NotFound", c.getArchive({ path: "/nope" }), "Could not find the file /nope");

  // 404 on an unknown container.
  await expect404("inspect NotFound", docker.getContainer("nope").inspect(), "No such container: nope");
  await expect404("remove NotFound", docker.getContainer("nope").remove(), "No such container: nope");
  await expect404("image NotFound", docker.getImage("nope-image:latest").inspect(), "nope-image");

  // List filters.
  const names = (l) => l.map((x) => x.Names[0].replace(/^\//, "")).sort();
  const x = await docker.createContainer({ Image: IMG, Cmd: ["true"], name: PREFIX + "-exited" });
  await x.start();
  await x.wait();
  const byName = await docker.listContainers({ filters: { name: [PREFIX + "-main"] } });
  check("filter name", JSON.stringify(names(byName)) === JSON.stringify([PREFIX + "-main"]), JSON.stringify(names(byName)));
  const byLabel = await docker.listContainers({ all: true, filters: { label: ["e2e=dockerode"] } });
  check("filter label", JSON.stringify(names(byLabel)) === JSON.stringify([PREFIX + "-main"]), JSON.stringify(names(byLabel)));
  const exited = names(await docker.listContainers({ all: true, filters: { status: ["exited"] } }));
  check("filter status", exited.includes(PREFIX + "-exited") && !exited.includes(PREFIX + "-main"), JSON.stringify(exited));
  const running = names(await docker.listContainers());
  check("list running", running.includes(PREFIX + "-main") && !running.includes(PREFIX + "-exited"), JSON.stringify(running));

  await x.remove();
  await c.remove({ force: true });
  await expect404("removed", c.inspect(), "No such container");
  console.log("done");
}

// Hijacked exec connections and the modem's keep-alive sockets would keep
// the event loop alive: exit explicitly once every check has passed.
main().then(() => process.exit(0)).catch((err) => {
  console.log(`FAIL unexpected: ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
