package gittest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHServer serves a Repo's bare repository over SSH on loopback, as a Git
// host does: public-key authentication by one authorized key, and exec of
// git-upload-pack for the repository.
type SSHServer struct {
	// URL is ssh://git@127.0.0.1:PORT/intents.git.
	URL string
	// KnownHosts is a known_hosts file holding the server's host key.
	KnownHosts string
	ln         net.Listener
	wg         sync.WaitGroup
}

// ServeSSH serves g's bare repository to the holder of the private key
// whose public key line is authorized, until the test ends or Stop.
func (g *Repo) ServeSSH(authorized string) *SSHServer {
	g.t.Helper()
	want, _, _, _, err := ssh.ParseAuthorizedKey([]byte(authorized))
	if err != nil {
		g.t.Fatalf("authorized key: %v", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		g.t.Fatal(err)
	}
	hostKey, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		g.t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if bytes.Equal(k.Marshal(), want.Marshal()) {
			return nil, nil
		}
		return nil, fmt.Errorf("key not authorized")
	}}
	cfg.AddHostKey(hostKey)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		g.t.Fatal(err)
	}
	s := &SSHServer{ln: ln, URL: "ssh://git@" + ln.Addr().String() + "/" + filepath.Base(g.Bare)}
	s.KnownHosts = filepath.Join(g.t.TempDir(), "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(ln.Addr().String())}, hostKey.PublicKey())
	if err := os.WriteFile(s.KnownHosts, []byte(line+"\n"), 0o600); err != nil {
		g.t.Fatal(err)
	}
	root := filepath.Dir(g.Bare)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() { defer s.wg.Done(); serveSSHConn(c, cfg, root) }()
		}
	}()
	g.t.Cleanup(s.Stop)
	return s
}

// Stop stops the server: its port refuses connections from now on.
func (s *SSHServer) Stop() {
	_ = s.ln.Close()
}

func serveSSHConn(c net.Conn, cfg *ssh.ServerConfig, root string) {
	defer c.Close()
	conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer conn.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "session only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		go serveSession(ch, creqs, root)
	}
}

// serveSession runs the one command a Git client asks for:
// git-upload-pack '/intents.git'.
func serveSession(ch ssh.Channel, reqs <-chan *ssh.Request, root string) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" || len(req.Payload) < 4 {
			_ = req.Reply(req.Type == "env", nil)
			continue
		}
		cmdline := string(req.Payload[4:])
		prog, arg, _ := strings.Cut(cmdline, " ")
		if prog != "git-upload-pack" {
			_ = req.Reply(false, nil)
			return
		}
		_ = req.Reply(true, nil)
		repo := filepath.Join(root, filepath.Base(strings.Trim(arg, "'\"")))
		cmd := exec.Command("git-upload-pack", repo)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
		cmd.WaitDelay = time.Second // the client may keep the channel open
		code := uint32(0)
		if err := cmd.Run(); err != nil {
			code = 1
		}
		_ = ch.CloseWrite()
		status := make([]byte, 4)
		binary.BigEndian.PutUint32(status, code)
		_, _ = ch.SendRequest("exit-status", false, status)
		_, _ = io.Copy(io.Discard, ch)
		return
	}
}
