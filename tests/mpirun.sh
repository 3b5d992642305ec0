#!/usr/bin/env bash
# Runs an MPI job on this machine over loopback TCP, as the tests do: any user (root
# included), more ranks than cores, no core binding (each rank runs its own threads).
# usage: tests/mpirun.sh -np N program args...   (MPIRUN: the launcher, default mpirun)
exec "${MPIRUN:-mpirun}" --allow-run-as-root --oversubscribe --bind-to none \
  --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "$@"
