#!/usr/bin/env bash
# inagg-worker's command line as all_reduce_perf's, without a network: the
# options nccl-tests has and inagg cannot honour are refused with a sentence that says what is
# supported, sizes take K/M/G, the old spellings (--check alone, --warmup, --dtype fp32) still
# parse, and --print-job shows the job those options make. No root needed.
#   test_worker_cli.sh INAGG_WORKER
set -uo pipefail
worker=$1
fail() { echo "FAIL: $*"; exit 1; }
base=(--workers 4 --rank 0)

# refused "WANT IN MESSAGE" ARGS...: exit 2 and the message on stderr.
refused() {
  local want=$1 out rc
  shift
  out=$("$worker" "${base[@]}" "$@" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" = 2 ] || fail "'$*' exited with $rc, want 2: $out"
  grep -qF -- "$want" <<<"$out" || fail "'$*': '$out' does not say '$want'"
}
refused "the appliance and the XDP tier only sum (-o sum)" -o prod -b 8 -e 1K -f 2
refused "-o all are not supported" -o all
refused "-d all" -d all
refused "--datatype (-d) must be float (float32, fp32), half (float16, fp16), bfloat16 (bf16), int32 (int); got 'double'" -d double
refused "-g/--ngpus and -t/--nthreads must be 1" -g 2
refused "-g/--ngpus and -t/--nthreads must be 1" -t 4
refused "-m/--agg_iters and -N/--run_cycles must be 1" -m 2
refused "invalid size '12Q' for --minbytes" -b 12Q
refused "invalid size '-8' for --maxbytes" -e -8
refused "--maxbytes (-e) 1024 is below --minbytes (-b) 8192" -b 8K -e 1K -f 2
refused "the sizes never grow" -b 8 -e 1K -f 1 -i 0
refused "--iters (-n) must be at least 1" -n 0 -b 8 -e 8
refused "--dtype and --datatype (-d) disagree" --dtype fp32 -d half
refused "--print-job with --transport verbs or --exchange" --exchange --print-job
(export INAGG_XDP_KEY=000102030405060708090a0b0c0d0e0f
  refused "--exchange runs --mode ina or ring" --exchange --mode xdp --xdp-heads 10.77.0.201 -b 8 -e 8) || exit 1
# The XDP tier's packets carry a MAC under the job's key: without it the tier is not used.
(unset INAGG_XDP_KEY; refused "--mode xdp needs the job's key for the XDP tier" --mode xdp --xdp-heads 10.77.0.201 -b 8 -e 8) || exit 1
(unset INAGG_XDP_KEY; refused "cannot read the secret file '/nonexistent/key'" --mode auto --xdp-heads 10.77.0.201 \
  --xdp-key-file /nonexistent/key -b 8 -e 8) || exit 1
(export INAGG_XDP_KEY=0001020304050607; refused "is not 32 hex digits" --mode xdp --xdp-heads 10.77.0.201 -b 8 -e 8) || exit 1
# The ranks' meeting is authenticated: without the job's secret no rank starts (the XDP tier alone
# meets nobody); --insecure-exchange, by name, goes on to the next check.
(
  unset INAGG_EXCHANGE_SECRET
  export INAGG_XDP_KEY=000102030405060708090a0b0c0d0e0f
  refused "the ranks' meeting needs the job's secret" --exchange --mode ring -b 8 -e 8
  refused "the ranks' meeting needs the job's secret, the same on every rank: set \$INAGG_EXCHANGE_SECRET" -b 8 -e 8
  refused "the ranks' meeting secret: cannot read the secret file" --exchange --mode ring -b 8 -e 8 \
    --exchange-secret-file /nonexistent/secret
  refused "MiB of buffers" --insecure-exchange -b 8 -e 60G -f 2
  refused "MiB of buffers" --mode xdp --xdp-heads 10.77.0.201 -b 8 -e 60G -f 2
) || exit 1
# The other checks, with the secret a launcher hands every rank.
INAGG_EXCHANGE_SECRET=$(head -c 24 /dev/urandom | base64)
export INAGG_EXCHANGE_SECRET
refused "MiB of buffers (with -c, every rank's input for the reference) but this host has" -b 8 -e 60G -f 2
refused "--collective must be allreduce, reduce_scatter or all_gather; got 'broadcast'" --collective broadcast -b 8 -e 8
refused "--collective reduce_scatter runs through the appliance only (--mode ina)" --collective reduce_scatter --mode ring -b 8 -e 8
refused "--collective all_gather runs on one appliance" --collective all_gather --racks 0,0,1,1 -b 8 -e 8
refused "--chunk must be at least 1 message" --collective all_gather --chunk 0 -b 8 -e 8
# --print-job registers the collective and its chunk.
job=$("$worker" "${base[@]}" --collective reduce_scatter --chunk 3 --print-job) || fail "--print-job: $job"
grep -q "^collective = reduce_scatter$" <<<"$job" && grep -q "^chunk = 3$" <<<"$job" || fail "--print-job: $job"

# The old `-n N` (workers) is now nccl-tests' iteration count: without --workers it says so.
out=$("$worker" -n 4 --rank 0 2>&1 >/dev/null)
grep -qF -- "--workers must be between 2 and 64" <<<"$out" || fail "-n without --workers: $out"

# Accepted: nccl-tests' spellings, K/M/G, -g 1, the old --check flag, --warmup, --dtype; --print-job
# shows the job with the datatype they name.
for args in "-b 8 -e 128M -f 2 -g 1 -d float -o sum -c 1 -n 20 -w 5" "-b 1K -e 1G -i 1M -d bfloat16 --check" \
  "--minbytes 8 --maxbytes 1M --stepfactor 2 --iters 2 --warmup 1 --dtype fp32 --check -r 0 -z 1 -a 1" \
  "-d int --check 3 -T 0"; do
  # shellcheck disable=SC2086
  job=$("$worker" "${base[@]}" $args --print-job 2>&1) || fail "'$args' refused: $job"
  case "$args" in
    *bfloat16*) want=bf16 ;;
    *"-d int"*) want=int32 ;;
    *) want=fp32 ;;
  esac
  grep -q "^dtype = $want$" <<<"$job" || fail "'$args': job file $job"
done
# --print-job needs no rank; the MPI launchers' environment gives rank and size.
job=$(OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=3 "$worker" -d half --print-job 2>&1) || fail "MPI environment: $job"
grep -q "^workers = 3$" <<<"$job" || fail "OMPI_COMM_WORLD_SIZE=3 not taken: $job"
grep -q "^dtype = fp16$" <<<"$job" || fail "-d half: $job"
# --payload auto: the largest RoCE path MTU up to the MTU (less a NIC's 96 bytes of headers) of the
# interface holding rank 0's address and that divides --message, against the MTU the kernel reports
# (ip link), computed here in awk; as if 1500 where no interface holds the address.
lo_mtu=$(ip -o link show lo | sed -n 's/.* mtu \([0-9]*\) .*/\1/p')
for m in 65536 2048 1024; do
  want=$(awk -v mtu="$lo_mtu" -v m="$m" 'BEGIN {for (p = 4096; p >= 256; p /= 2) if (p + 96 <= mtu && m % p == 0) {print p; exit}}')
  job=$("$worker" --workers 2 --ip-base 127.0.0.0 --message "$m" --print-job 2>&1) || fail "--payload auto on lo: $job"
  grep -q "^payload_bytes = $want$" <<<"$job" || fail "--payload auto, lo MTU $lo_mtu, --message $m: want $want, got $job"
done
job=$("$worker" --workers 2 --ip-base 192.0.2.0 --print-job 2>&1) || fail "--payload auto off-host: $job"
grep -q "^payload_bytes = 1024$" <<<"$job" || fail "--payload auto for an address no interface holds: want 1024 (MTU 1500), got $job"
refused "--payload must be auto or a number" --payload big
echo "ok: nccl-tests options refused with clear messages where unsupported, accepted with its spellings and inagg's old ones"
