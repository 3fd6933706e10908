# The devices of husk's minimal QEMU (build.sh), beyond those every x86
# machine needs. It must give the machines husk starts (see qemu.go's
# args) exactly the devices Debian's qemu-system-x86_64 gives them, so
# that templates and checkpoints made by either binary restore into the
# other: a snapshot names every device it holds, and QEMU refuses one
# whose device it lacks (HPET, vmport and vmmouse are on Q35 by default).
CONFIG_PCI_DEVICES=n

# Machines: q35 (husk's default), pc and microvm.
CONFIG_Q35=y
CONFIG_I440FX=y
CONFIG_MICROVM=y
CONFIG_HPET=y
CONFIG_VMPORT=y
CONFIG_VMMOUSE=y

# The container's disks (virtio-scsi on Q35, virtio-blk on microvm), its
# NICs, the agent's virtio-serial port, virtio-fs shares.
CONFIG_VIRTIO_PCI=y
CONFIG_VIRTIO_MMIO=y
CONFIG_VIRTIO_SCSI=y
CONFIG_VIRTIO_BLK=y
CONFIG_VIRTIO_NET=y
CONFIG_VIRTIO_SERIAL=y
CONFIG_VIRTIO_RNG=y
CONFIG_VHOST_USER_FS=y
