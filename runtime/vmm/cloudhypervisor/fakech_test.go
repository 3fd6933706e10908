package cloudhypervisor

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/husk-vm/husk/shim/proto"
)

// The fake cloud-hypervisor is this test binary re-executed by the
// driver as its binary: TestMain sees fakeEnv and serves the API on the
// --api-socket path it was given, as the real one would, so the driver is
// exercised as a real process (its own session, sockets relative to its
// working directory, a pid file, exit on vmm.shutdown).
const (
	fakeEnv        = "HUSK_FAKE_CH"         // "1": act as cloud-hypervisor
	fakeSpecEnv    = "HUSK_FAKE_CH_SPEC"    // the API description to serve
	fakeVersionEnv = "HUSK_FAKE_CH_VERSION" // its build version; default v53.0
	// fakeRestoreRecord is where the fake notes the vm.restore body it
	// accepted, for tests to check what the driver asked for.
	fakeRestoreRecord = "fake-restore.json"
)

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) == "1" {
		os.Exit(fakeMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeMain(args []string) int {
	version := cmp.Or(os.Getenv(fakeVersionEnv), "v53.0")
	if len(args) == 1 && args[0] == "--version" {
		fmt.Println("cloud-hypervisor " + version)
		return 0
	}
	if len(args) != 2 || args[0] != "--api-socket" || !strings.HasPrefix(args[1], "path=") {
		fmt.Fprintf(os.Stderr, "fake cloud-hypervisor: want --api-socket path=PATH, got %q\n", args)
		return 2
	}
	sock := strings.TrimPrefix(args[1], "path=")
	s, err := loadSpec(os.Getenv(fakeSpecEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake cloud-hypervisor:", err)
		return 1
	}
	// cloud-hypervisor keeps a lock file beside its API socket.
	if err := os.WriteFile(sock+".lock", nil, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "fake cloud-hypervisor:", err)
		return 1
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake cloud-hypervisor:", err)
		return 1
	}
	f := &fakeCH{spec: s, version: version, exit: make(chan struct{})}
	srv := &http.Server{Handler: f}
	go srv.Serve(l)
	<-f.exit
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	return 0
}

// fakeCH serves the API description with a small VM state machine, so
// that calls out of order get cloud-hypervisor-style errors. Every
// request is validated against the description, and so is every answer
// before it is sent.
type fakeCH struct {
	spec     *spec
	version  string
	exit     chan struct{}
	exitOnce sync.Once

	mu     sync.Mutex
	state  string // "" while no VM exists
	config map[string]any
	vsock  net.Listener
}

// chError is cloud-hypervisor's error body: its error chain.
func chError(msgs ...string) []string { return append([]string{"Error from API"}, msgs...) }

func (f *fakeCH) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.URL.Scheme, r.URL.Host = "http", r.Host
	in, err := f.spec.validateRequest(r.Context(), r)
	if in == nil {
		f.reply(w, r, nil, http.StatusNotFound, []string{"Not Found", err.Error()})
		return
	}
	if err != nil {
		f.reply(w, r, in, http.StatusBadRequest, []string{"Failed to deserialize JSON", "request violates the API description: " + err.Error()})
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		f.reply(w, r, in, http.StatusBadRequest, []string{"Bad Request", err.Error()})
		return
	}
	endpoint := strings.TrimPrefix(r.URL.Path, "/api/v1/")
	f.mu.Lock()
	status, answer := f.handle(endpoint, body)
	f.mu.Unlock()
	f.reply(w, r, in, status, answer)
	if endpoint == "vmm.shutdown" {
		f.exitOnce.Do(func() { close(f.exit) })
	}
}

func (f *fakeCH) reply(w http.ResponseWriter, r *http.Request, in *openapi3filter.RequestValidationInput, status int, answer any) {
	var b []byte
	if answer != nil {
		var err error
		if b, err = json.Marshal(answer); err != nil {
			status, b = 500, []byte(`["fake cloud-hypervisor: encode answer"]`)
		}
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	if in != nil {
		if err := validateResponse(r.Context(), in, status, h, b); err != nil {
			status = 500
			b, _ = json.Marshal([]string{"fake cloud-hypervisor: its answer violates the API description", err.Error()})
		}
	}
	for k, v := range h {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	if status != http.StatusNoContent {
		w.Write(b)
	}
}

func (f *fakeCH) handle(endpoint string, body []byte) (int, any) {
	notCreated := func() (int, any) { return http.StatusNotFound, chError("VM is not created") }
	wrongState := func(action, to string) (int, any) {
		return http.StatusMethodNotAllowed, chError("The VM could not be "+action, fmt.Sprintf("Invalid state transition: %s to %s", f.state, to))
	}
	switch endpoint {
	case "vmm.ping":
		return 200, VmmPingResponse{BuildVersion: f.version, Version: strings.TrimPrefix(f.version, "v"), PID: int64(os.Getpid())}
	case "vmm.shutdown":
		f.down()
		return 204, nil
	case "vm.create":
		if f.state != "" {
			return 500, chError("The VM could not be created", "VM is already created")
		}
		var cfg map[string]any
		if err := json.Unmarshal(body, &cfg); err != nil {
			return 400, []string{"Failed to deserialize JSON", err.Error()}
		}
		f.config, f.state = cfg, StateCreated
		return 204, nil
	case "vm.boot":
		if f.state == "" {
			return notCreated()
		}
		if f.state != StateCreated {
			return wrongState("booted", StateRunning)
		}
		if err := f.up(); err != nil {
			return 500, chError("The VM could not boot", err.Error())
		}
		f.state = StateRunning
		return 204, nil
	case "vm.info":
		if f.state == "" {
			return notCreated()
		}
		return 200, map[string]any{"config": f.config, "state": f.state, "memory_actual_size": f.memory()}
	case "vm.pause":
		if f.state == "" {
			return notCreated()
		}
		if f.state != StateRunning {
			return wrongState("paused", StatePaused)
		}
		f.state = StatePaused
		return 204, nil
	case "vm.resume":
		if f.state == "" {
			return notCreated()
		}
		if f.state != StatePaused {
			return wrongState("resumed", StateRunning)
		}
		f.state = StateRunning
		return 204, nil
	case "vm.shutdown":
		if f.state == "" {
			return notCreated()
		}
		if f.state != StateRunning && f.state != StatePaused {
			return wrongState("shut down", StateShutdown)
		}
		f.down()
		f.state = StateShutdown
		return 204, nil
	case "vm.snapshot":
		if f.state == "" {
			return notCreated()
		}
		if f.state != StatePaused {
			return wrongState("snapshotted", StatePaused)
		}
		var sc VmSnapshotConfig
		if err := json.Unmarshal(body, &sc); err != nil {
			return 400, []string{"Failed to deserialize JSON", err.Error()}
		}
		if err := f.snapshot(sc.DestinationURL); err != nil {
			return 500, chError("The VM could not be snapshotted", err.Error())
		}
		return 204, nil
	case "vm.restore":
		if f.state != "" {
			return 404, chError("The VM could not be restored", "VM is already created")
		}
		var rc RestoreConfig
		if err := json.Unmarshal(body, &rc); err != nil {
			return 400, []string{"Failed to deserialize JSON", err.Error()}
		}
		if err := f.restore(rc, body); err != nil {
			return 500, chError("The VM could not be restored", err.Error())
		}
		return 204, nil
	case "vm.resize":
		if f.state == "" {
			return notCreated()
		}
		var rz VmResize
		if err := json.Unmarshal(body, &rz); err != nil {
			return 400, []string{"Failed to deserialize JSON", err.Error()}
		}
		cpus, _ := f.config["cpus"].(map[string]any)
		maxCPUs, _ := cpus["max_vcpus"].(float64)
		if rz.DesiredVCPUs > int(maxCPUs) {
			return 500, chError("Error resizing VM", fmt.Sprintf("Failed to resize vCPUs: %d requested, at most %d", rz.DesiredVCPUs, int(maxCPUs)))
		}
		if rz.DesiredVCPUs > 0 {
			cpus["boot_vcpus"] = rz.DesiredVCPUs
		}
		if rz.DesiredRAM > 0 {
			mem, _ := f.config["memory"].(map[string]any)
			mem["size"] = rz.DesiredRAM
		}
		return 204, nil
	case "vm.add-net":
		return f.addDevice(body, "net", 4, "The new network device could not be added to the VM", nil)
	case "vm.add-disk":
		return f.addDevice(body, "disks", 8, "The disk could not be added to the VM", func(d map[string]any) error {
			_, err := os.Stat(str(d, "path"))
			return err
		})
	case "vm.remove-device":
		if f.state == "" {
			return notCreated()
		}
		var rd VmRemoveDevice
		if err := json.Unmarshal(body, &rd); err != nil {
			return 400, []string{"Failed to deserialize JSON", err.Error()}
		}
		for _, key := range []string{"net", "disks"} {
			all, _ := f.config[key].([]any)
			for i, n := range all {
				if o, ok := n.(map[string]any); ok && str(o, "id") == rd.ID {
					f.config[key] = append(all[:i:i], all[i+1:]...)
					return 204, nil
				}
			}
		}
		return 404, chError("The device could not be removed from the VM", "Unknown device "+rd.ID)
	case "vm.counters":
		if f.state == "" {
			return notCreated()
		}
		c := Counters{}
		for _, d := range list(f.config, "disks") {
			c[str(d, "id")] = map[string]int64{"read_bytes": 512, "write_bytes": 0, "read_ops": 1, "write_ops": 0}
		}
		for _, n := range list(f.config, "net") {
			c[str(n, "id")] = map[string]int64{"rx_bytes": 0, "tx_bytes": 0, "rx_frames": 0, "tx_frames": 0}
		}
		return 200, c
	}
	return 500, chError("fake cloud-hypervisor does not implement " + endpoint)
}

// addDevice is vm.add-net and vm.add-disk: the device (body) joins the
// config's list key, its id unique among disks and NICs; check, when
// set, refuses what cloud-hypervisor could not open. Its PCI slots start
// at firstSlot.
func (f *fakeCH) addDevice(body []byte, key string, firstSlot int, failure string, check func(map[string]any) error) (int, any) {
	if f.state == "" {
		return http.StatusNotFound, chError("VM is not created")
	}
	var dev map[string]any
	if err := json.Unmarshal(body, &dev); err != nil {
		return 400, []string{"Failed to deserialize JSON", err.Error()}
	}
	for _, d := range append(list(f.config, "net"), list(f.config, "disks")...) {
		if str(d, "id") == str(dev, "id") {
			return 500, chError(failure, "Identifier "+str(dev, "id")+" is not unique")
		}
	}
	if check != nil {
		if err := check(dev); err != nil {
			return 500, chError(failure, err.Error())
		}
	}
	have := list(f.config, key)
	all, _ := f.config[key].([]any)
	f.config[key] = append(all, dev)
	return 200, map[string]string{"id": str(dev, "id"), "bdf": fmt.Sprintf("0000:00:%02x.0", firstSlot+len(have))}
}

func (f *fakeCH) memory() int64 {
	mem, _ := f.config["memory"].(map[string]any)
	size, _ := mem["size"].(float64)
	return int64(size)
}

func list(m map[string]any, key string) []map[string]any {
	var out []map[string]any
	l, _ := m[key].([]any)
	for _, v := range l {
		if o, ok := v.(map[string]any); ok {
			out = append(out, o)
		}
	}
	return out
}

func str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// up does what booting or restoring the VM does on the host: opens the
// payload and the disks (read-only ones read-only), the serial file, and
// binds the hybrid-vsock socket, all relative to the working directory
// as cloud-hypervisor resolves them.
func (f *fakeCH) up() error {
	payload, _ := f.config["payload"].(map[string]any)
	for _, k := range []string{"kernel", "initramfs"} {
		if _, err := os.Stat(str(payload, k)); err != nil {
			return fmt.Errorf("payload %s: %w", k, err)
		}
	}
	for _, d := range list(f.config, "disks") {
		flag := os.O_RDWR
		if ro, _ := d["readonly"].(bool); ro {
			flag = os.O_RDONLY
		}
		fd, err := os.OpenFile(str(d, "path"), flag, 0)
		if err != nil {
			return fmt.Errorf("Cannot open disk path %s: %w", str(d, "path"), err)
		}
		fd.Close()
	}
	if serial, ok := f.config["serial"].(map[string]any); ok && str(serial, "mode") == ModeFile {
		con, err := os.OpenFile(str(serial, "file"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("serial file: %w", err)
		}
		fmt.Fprintln(con, "fake guest up")
		con.Close()
	}
	vs, ok := f.config["vsock"].(map[string]any)
	if !ok {
		return nil
	}
	l, err := net.Listen("unix", str(vs, "socket"))
	if err != nil {
		return fmt.Errorf("vsock socket: %w", err)
	}
	f.vsock = l
	go f.serveVsock(l)
	return nil
}

func (f *fakeCH) down() {
	if f.vsock != nil {
		f.vsock.Close()
		f.vsock = nil
	}
}

// serveVsock speaks hybrid vsock with a guest whose agent echoes on
// proto.VsockPort while the VM runs.
func (f *fakeCH) serveVsock(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			port, ok := strings.CutPrefix(strings.TrimSpace(line), "CONNECT ")
			f.mu.Lock()
			running := f.state == StateRunning
			f.mu.Unlock()
			if !ok || port != strconv.Itoa(proto.VsockPort) || !running {
				return // as cloud-hypervisor does when nothing listens
			}
			fmt.Fprintf(c, "OK %d\n", 1<<30)
			io.Copy(c, br)
		}()
	}
}

func fileURLPath(u string) (string, error) {
	p, ok := strings.CutPrefix(u, "file://")
	if !ok || !filepath.IsAbs(p) {
		return "", fmt.Errorf("unsupported URL %q", u)
	}
	return p, nil
}

// snapshot writes what cloud-hypervisor writes: config.json (the full
// config, defaults included), state.json and memory-ranges.
func (f *fakeCH) snapshot(url string) error {
	dir, err := fileURLPath(url)
	if err != nil {
		return err
	}
	b, err := json.Marshal(f.config)
	if err != nil {
		return err
	}
	var full map[string]any
	json.Unmarshal(b, &full)
	full["iommu"], full["watchdog"] = false, false
	for _, d := range list(full, "disks") {
		d["direct"], d["num_queues"] = false, 1
	}
	for _, n := range list(full, "net") {
		n["num_queues"], n["queue_size"] = 2, 256
	}
	files := map[string][]byte{"state.json": []byte(`{"fake":true}`), "memory-ranges": []byte("guest memory")}
	if files["config.json"], err = json.Marshal(full); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeCH) restore(rc RestoreConfig, body []byte) error {
	dir, err := fileURLPath(rc.SourceURL)
	if err != nil {
		return err
	}
	for _, name := range []string{"state.json", "memory-ranges"} {
		if _, err := os.ReadFile(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return err
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	f.config = cfg
	if err := f.up(); err != nil {
		return err
	}
	if err := os.WriteFile(fakeRestoreRecord, body, 0o644); err != nil {
		return err
	}
	f.state = StatePaused
	if rc.Resume {
		f.state = StateRunning
	}
	return nil
}
