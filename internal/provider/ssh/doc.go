// Package ssh is the provider of SSH fleets (docs/ssh-fleets.md): owned
// machines declared in a NodePool of provider ssh, which gpufleet logs in to
// with golang.org/x/crypto/ssh, probes (nvidia-smi; none means a CPU-only
// node), installs its own binary on and runs `gpufleet agent` on, as a
// systemd unit where systemd runs and else as a supervised background
// process with a pidfile. Removing a host from the fleet stops its agent and
// deletes everything gpufleet put there.
//
// The design splits the job in three:
//   - Dialer connects: a pinned host key or a known_hosts file must vouch
//     for every host and bastion (ErrHostKey otherwise), the private key
//     comes from a sealed secret by reference (Keys), and ProxyJump is
//     honoured.
//   - Installer does one host: Probe, Install (idempotent: a host whose
//     install manifest matches and whose agent runs is left alone) and
//     Uninstall (idempotent: a clean host is success).
//   - Fleet follows the declared pools (SetPools, Run): it installs hosts
//     that appear or change and uninstalls hosts that leave, remembering what
//     it installed in a state file so a host removed while the server was
//     down is still cleaned up. Fleet is also the provider.Provider of
//     these machines, with fixed capacity: Launch and Terminate answer
//     ErrFixedCapacity, and Offers, List and Machines describe the hosts
//     as last probed.
//
// Invariants: gpufleet never trusts an unknown host key; everything it puts
// on a host lives under <installDir>/<node> plus, with systemd, one unit
// file, so Uninstall can remove it all; the agent's token is written to a
// 0600 file, never on a command line.
package ssh
