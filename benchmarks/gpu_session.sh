#!/usr/bin/env bash
# The lent-GPU session, in two parts (each well inside one 10-minute device call):
#   bash benchmarks/gpu_session.sh tests   # the test suite on CUDA (4 pytest jobs at once): 1 rank,
#                                          # and 2-4 ranks sharing the GPU (staged)
#   bash benchmarks/gpu_session.sh bench   # GEMM, convolution and redistribution benchmarks on the GPU
#   bash benchmarks/gpu_session.sh train   # benchmarks/train.py --gpu (Fashion-MNIST in data/)
#   bash benchmarks/gpu_session.sh solvers|indexing|operators|io  # one area's tests on CUDA, its GPU benchmark
#   bash benchmarks/gpu_session.sh redistribute  # redistribution tests on CUDA; its benchmark on CUDA
#                                          # and on CPU tensors with 4 and 8 ranks (a core each)
#   bash benchmarks/gpu_session.sh indexing  # indexing / shape tests on CUDA (1-4 ranks), benchmarks/indexing.py --gpu
#   bash benchmarks/gpu_session.sh hotpath  # train.py --gpu (dmath, torch eager, torch whole-step
#                                          # CUDA graph, torch.compile), one matmul call vs torch
#   bash benchmarks/gpu_session.sh cpu16    # the 16-core host's CPUs: iterative.py (CG, power
#                                          # iteration vs numpy threads), dispatch.py
#   bash benchmarks/gpu_session.sh cpu16b   # the 16-core host's CPUs: train.py LeNet on 4/16 ranks,
#                                          # fft.py 256^3 on 1/4/16 ranks, eigh/svd vs ScaLAPACK
#   bash benchmarks/gpu_session.sh operators  # operator tests on CUDA (1-4 ranks, both modes); dispatch
#                                          # benchmark on CPU tensors (quiet host: writes docs) and --gpu
#   bash benchmarks/gpu_session.sh graphhost  # graph_host.py --gpu: host us between two replays (dmath
#                                          # and torch's whole-step graph), LeNet and ResNet
#   bash benchmarks/gpu_session.sh round3c|round3d  # round 3's last figures: GPU (graphs, training,
#                                          # solvers) | the host's 16 CPU cores (dispatch, eigh/svd,
#                                          # look-ahead, data-parallel step)
#   bash benchmarks/gpu_session.sh round3e  # one call: GPU training, then the 16-core data-parallel
#                                          # step and client-server latency
#   bash benchmarks/gpu_session.sh round3f  # one call: CUDA capture tests, GPU solvers, eigh/svd on 16
#                                          # and 4 CPU ranks vs scipy threads and ScaLAPACK
#   bash benchmarks/gpu_session.sh round3g  # GPU kernels per replayed step (step_kernels.py), eigh/svd
#                                          # phases on 16 and 4 CPU ranks (spectral_phases.py)
#   bash benchmarks/gpu_session.sh round3h  # CUDA capture tests, graph_host.py, LeNet replay kernels
#   bash benchmarks/gpu_session.sh round3i  # eigvalsh / svdvals vs band width on 16 and 4 CPU ranks
#   bash benchmarks/gpu_session.sh round3j  # CUDA capture tests, graph_host.py, replay kernels, GPU
#                                          # solvers, skinny_gemm.py on the host's CPU
#   bash benchmarks/gpu_session.sh round3k  # eigh/svd on 16 and 4 CPU ranks (n = 2048), 16 (n = 4096)
#   bash benchmarks/gpu_session.sh round3l  # eigh/svd on 4 CPU ranks (n = 2048); 16 ranks n = 8192
#   bash benchmarks/gpu_session.sh round3n  # eigvalsh on 16 CPU ranks, band values on rank 0 alone
#   bash benchmarks/gpu_session.sh round3q  # round3o's first part in < 280 s
#   bash benchmarks/gpu_session.sh round3u  # the compiled dropout-mask kernel, LeNet replay kernels and
#                                          # host time, band.symmetric before / after on 16 CPU ranks,
#                                          # eigvalsh at 8192, AdamW on the GPU
#   bash benchmarks/gpu_session.sh round3w  # round3v's GPU part after its fixes
#   bash benchmarks/gpu_session.sh round3z  # solver tests on CUDA, GPU training
#   bash benchmarks/gpu_session.sh eager    # the eager step's host time on the GPU (train_overhead.py
#                                          # --gpu --profile: dmath vs torch, where dmath's time goes)
#   bash benchmarks/gpu_session.sh round3ac # eager step profile, GPU training, one matmul call
#   bash benchmarks/gpu_session.sh round3ad # 16-rank CG (n = 16384), data-parallel step, LU nb on 4 ranks
#   bash benchmarks/gpu_session.sh round3ae # a GEMM / LAPACK panels between torch ops on 16 threads, the
#                                          # 16-thread step
#   bash benchmarks/gpu_session.sh round3ab # GPU training, one matmul call, solvers vs torch.linalg
#   bash benchmarks/gpu_session.sh round3aa # LU phases on 4 / 16 CPU ranks, LU and Cholesky vs scipy
#                                          # threads on 4 and 16 ranks, solver tests on CUDA
#   bash benchmarks/gpu_session.sh round3y  # LU / Cholesky phases and block sizes, solvers on CPU ranks;
#                                          # GPU matmul and training
#   bash benchmarks/gpu_session.sh round3x  # the host's CPUs: factorizations on each grid shape vs
#                                          # scipy threads, the data-parallel step by ranks x threads
#   bash benchmarks/gpu_session.sh round3v  # fused AdamW captured and eager on CUDA (tests, host time,
#                                          # replay kernels vs torch's graphs, eager steps), the 16-
#                                          # and 4-rank data-parallel step, solvers on 4 ranks
#   bash benchmarks/gpu_session.sh round3r  # graph host time (LeNet) and the CUDA captured-step worker
#   bash benchmarks/gpu_session.sh round3o  # CPU topology, graph_host.py --gpu --profile, 16-core
#                                          # data-parallel step, eigh native on/off, eigvalsh (16)
#   bash benchmarks/gpu_session.sh round3m  # eigh/eigvalsh on 4 / 16 CPU ranks up to n = 8192; cholesky,
#                                          # lu, qr on 4 ranks vs scipy 4 threads
#   bash benchmarks/gpu_session.sh round3   # < 540 s: captured-step and NCCL-capture tests on CUDA,
#                                          # graph_host.py, train.py LeNet (dmath, torch graph), fft.py
#                                          # --gpu, redistribute.py --wire (2, 4 ranks on the GPU),
#                                          # solvers.py --gpu (incl. eigh, svd); carry data/gz
# Logs go to $OUT (the device tool's output folder) or benchmarks/out. zarr is not in the host's
# image: carry .whl/ made by `pip download --no-deps --only-binary=:all: --python-version 3.12
# --platform manylinux2014_x86_64 -d .whl zarr numcodecs donfig google-crc32c` (versions of the venv).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 DMATH_DEVICE=cuda
# packages the host's image lacks (zarr and its codecs for dmath.save), carried as wheels in .whl/
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi -L
python3 -c "import torch, mpi4py; print('torch', torch.__version__, 'mpi4py', mpi4py.__version__)"
step() { echo "== $1 (${SECONDS}s)"; }
dp_step() {  # $1: log name, then "ranks threads images" triples (default "16 1 8" "4 1 32"):
             # the 16-core data-parallel LeNet step (global batch 128; DP_ROUNDS rounds, default
             # 5) next to one torch process with 16 threads
  local log=$1; shift
  [ $# -gt 0 ] || set -- "16 1 8" "4 1 32"
  step "data-parallel step"
  local dmath_cli='import sys; from dmath.cli import main; sys.exit(main(sys.argv[1:]))'
  for rtb in "$@"; do set -- $rtb
    timeout 60 python3 -c "$dmath_cli" run -n $1 benchmarks/train_overhead.py --models lenet --data-parallel \
        --batch $3 --threads $2 --rounds ${DP_ROUNDS:-5} --steps 20 2>&1 | tee -a "$OUT/$log" | tail -2
  done
  timeout 40 python3 benchmarks/train_overhead.py --models lenet --batch 128 --threads 16 --steps 30 \
      2>&1 | tee -a "$OUT/$log" | tail -6
}
graph_step_gpu() {  # $1: log prefix. The LeNet graph step's host time and replay kernels next
                   # to torch's whole-step graphs (capturable; fused + capturable)
  step "graph host time and steps, LeNet"
  timeout 80 python3 benchmarks/graph_host.py --gpu --models lenet --steps 300 2>&1 \
      | tee "$OUT/$1_graph_host.log" | tail -4
  step "the kernels of a LeNet replay"
  timeout 60 python3 benchmarks/step_kernels.py --models lenet --replays 50 --top 12 2>&1 \
      | tee "$OUT/$1_kernels.log" | grep -E "kernels,|adam|multi_tensor" | head -12
}
synthetic_fm() {  # /tmp/fm.npz: random Fashion-MNIST-shaped images and labels (the lent hosts
                  # have no copy of the data set; train.py's speeds do not depend on the pixels)
  python3 -c "import numpy as np; r = np.random.default_rng(0); np.savez('/tmp/fm.npz', \
x_train=r.integers(0, 256, (60000, 28, 28), dtype=np.uint8), y_train=r.integers(0, 10, 60000), \
x_test=r.integers(0, 256, (10000, 28, 28), dtype=np.uint8), y_test=r.integers(0, 10, 10000))"
}
graph_checks() {  # $1 s: the captured-step worker (CUDA graphs only; the replay backend is checked
                  # on CPUs) and the NCCL-capture tests side by side, then the host time per replay
  step tests
  mkdir -p "$OUT/r3_tmp"
  timeout "$1" python3 tests/workers/train_graphs.py "$OUT/r3_tmp" cuda > "$OUT/r3_train_graphs.log" 2>&1 &
  timeout "$1" python3 -m pytest -q -p no:cacheprovider -rs tests/test_graph_nccl.py > "$OUT/r3_nccl.log" 2>&1 &
  wait; rm -rf "$OUT/r3_tmp"
  tail -n 3 "$OUT/r3_train_graphs.log" "$OUT/r3_nccl.log"
  step graph_host
  timeout 60 python3 benchmarks/graph_host.py --gpu --models lenet,resnet --steps 300 2>&1 | tee "$OUT/r3_graph_host.log"
}
case "${1:-tests}" in
  tests)   # four pytest jobs side by side (the host has 16 cores; MPI ranks share the GPU)
    groups=("test_nn.py test_layout.py test_docs.py test_exchange_parts.py test_products.py test_fuzz.py"
            "test_redistribute.py test_train.py test_errors.py test_hardening.py"
            "test_indexing.py test_shape.py test_reductions.py test_gemm.py test_solvers.py"
            "test_operators.py test_ops.py test_io.py test_client_server.py test_exchange.py test_nn_strategy.py")
    for i in "${!groups[@]}"; do
      timeout 560 python3 -m pytest -q -p no:cacheprovider $(printf 'tests/%s ' ${groups[$i]}) \
          > "$OUT/gpu_tests_$i.log" 2>&1 &
    done
    wait
    ls tests/test_*.py | sed 's|tests/||' | sort > "$OUT/all.txt"
    printf '%s\n' ${groups[@]} | sort > "$OUT/grouped.txt"
    comm -23 "$OUT/all.txt" "$OUT/grouped.txt" | sed 's/^/NOT RUN: /'
    tail -n 3 "$OUT"/gpu_tests_*.log
    ;;
  bench)
    timeout 200 python3 benchmarks/gemm.py --gpu --ranks 4 2>&1 | tee "$OUT/gpu_gemm.log" | tail -30
    timeout 150 python3 benchmarks/conv.py --gpu --no-doc 2>&1 | tee "$OUT/gpu_conv.log" | tail -25
    timeout 120 python3 benchmarks/redistribute.py --ranks 4 --no-doc 2>&1 | tee "$OUT/gpu_redistribute.log" | tail -25
    timeout 120 python3 benchmarks/reductions.py --gpu --ranks 4 --no-doc 2>&1 | tee "$OUT/gpu_reductions.log" | tail -15
    ;;
  train)   # carry data/gz (`DMATH_DATA=data/gz dmath data fetch fashion-mnist --gz`: 30 MB)
    [ -d data/gz/fashion-mnist ] && export DMATH_DATA=data/gz
    timeout 560 python3 benchmarks/train.py --gpu 2>&1 | tee "$OUT/gpu_train.log" | tail -20
    cp docs/performance.md docs/img/train_*_gpu.png "$OUT"/ 2>/dev/null
    ;;
  hotpath)
    [ -d data/gz/fashion-mnist ] && export DMATH_DATA=data/gz
    sys=dmath,dmath-eager,torch,torch-graph,torch-compile
    timeout 120 python3 benchmarks/train.py --gpu --models lenet --systems torch-graph,torch-compile \
        --epochs 1 --limit 2560 --no-doc > "$OUT/gpu_train_smoke.log" 2>&1 || { sys=dmath,dmath-eager,torch; tail -30 "$OUT/gpu_train_smoke.log"; }
    timeout 420 python3 benchmarks/train.py --gpu --epochs ${EPOCHS:-3} --systems $sys 2>&1 | tee "$OUT/gpu_train.log" | tail -12
    cp docs/performance.md docs/img/train_*_gpu.png "$OUT"/ 2>/dev/null
    timeout 60 python3 benchmarks/gemm_call.py --gpu 2>&1 | tee "$OUT/gpu_gemm_call.log"
    ;;
  graphhost)
    timeout 200 python3 benchmarks/graph_host.py --gpu --models lenet,resnet 2>&1 | tee "$OUT/gpu_graph_host.log"
    ;;
  round3)  # every step under its own timeout (170+60+100+45+2*45+60 = 525 s); logs in $OUT
    [ -d data/gz/fashion-mnist ] && export DMATH_DATA=data/gz
    t0=$SECONDS
    graph_checks 170
    step train
    timeout 100 python3 benchmarks/train.py --gpu --models lenet --epochs 2 --systems dmath,torch-graph \
        --no-doc 2>&1 | tee "$OUT/r3_train.log" | tail -8
    step fft
    timeout 45 python3 benchmarks/fft.py --gpu --n 256 512 --repeat 5 2>&1 | tee "$OUT/r3_fft.log"
    for p in 2 4; do
      step "redistribute --wire, $p ranks"
      timeout 45 python3 benchmarks/redistribute.py --ranks $p --n 4096 --dtype float32 --repeat 7 \
          --wire bf16,int8 --no-doc 2>&1 | tee "$OUT/r3_redistribute_wire_$p.log" | tail -9
    done
    step solvers
    timeout 60 python3 benchmarks/solvers.py --gpu --n 4096 --spectral-n 2048 --repeats 2 2>&1 | tee "$OUT/r3_solvers.log"
    step "done after $((SECONDS - t0)) s"
    ;;
  round3b)  # after round3: tests, host overhead, training (LeNet and ResNet: dmath with and without
            # graphs, torch eager, torch whole-step graph), GEMM with wire formats (2 ranks on the GPU)
    [ -d data/gz/fashion-mnist ] && export DMATH_DATA=data/gz
    t0=$SECONDS
    graph_checks 200
    step train
    timeout 220 python3 benchmarks/train.py --gpu --models lenet,resnet --epochs 2 \
        --systems dmath,dmath-eager,torch,torch-graph --no-doc 2>&1 | tee "$OUT/r3_train.log" | tail -8
    step "gemm --wire, 2 ranks"
    timeout 60 python3 benchmarks/gemm.py --wire bf16,int8 --ranks 2 --n 4096 --dtypes float32 \
        --algorithms summa,replicate_b --repeats 5 2>&1 | tee "$OUT/r3_gemm_wire.log" | tail -8
    step "done after $((SECONDS - t0)) s"
    ;;
  round3c)  # < 540 s, GPU: captured-step and NCCL-capture tests on CUDA, host time per replay,
            # training (LeNet and ResNet: dmath with and without graphs, torch eager, torch
            # whole-step graph), solvers on the GPU (incl. eigh, svd); carry data/gz
    [ -d data/gz/fashion-mnist ] && export DMATH_DATA=data/gz
    t0=$SECONDS
    graph_checks 150
    step train
    timeout 230 python3 benchmarks/train.py --gpu --models lenet,resnet --epochs 2 \
        --systems dmath,dmath-eager,torch,torch-graph --no-doc 2>&1 | tee "$OUT/r3c_train.log" | tail -8
    step solvers
    timeout 70 python3 benchmarks/solvers.py --gpu --n 4096 --spectral-n 2048 --repeats 2 2>&1 \
        | tee "$OUT/r3c_solvers.log" | tail -10
    step "done after $((SECONDS - t0)) s"
    ;;
  round3d)  # < 560 s, the 16-core host's CPUs: client-server latency, eigh/svd vs scipy and
            # ScaLAPACK on 16 ranks, cholesky/lu/qr with look-ahead on/off on 4 and 16 ranks, the
            # data-parallel step's wall and CPU time (carry .venv/scalapack/debs)
    export DMATH_DEVICE=cpu
    t0=$SECONDS
    step dispatch
    timeout 80 python3 benchmarks/dispatch.py --ranks 2 --ops "A + 1" "sum(A)" "float(sum(A))" \
        --no-doc 2>&1 | tee "$OUT/r3d_dispatch.log" | tail -12
    step spectral
    python3 benchmarks/solvers.py --fetch-scalapack > /dev/null 2>&1
    timeout 160 python3 benchmarks/solvers.py --spectral --ranks 16 --sizes 2048 --nb 64 --repeats 1 \
        2>&1 | tee "$OUT/r3d_spectral.log" | tail -10
    for p in 4 16; do
      step "solvers, look-ahead on/off, $p ranks"
      timeout 110 python3 benchmarks/solvers.py --ranks $p --n 4096 --lookahead both --no-openblas \
          --no-single --no-doc 2>&1 | tee "$OUT/r3d_solvers_$p.log" | tail -12
    done
    dp_step r3d_dp.log
    step "done after $((SECONDS - t0)) s"
    ;;
  round3f)  # < 560 s: the captured-step and NCCL-capture tests on CUDA (after per-graph StepValues),
            # solvers on the GPU, then eigh/svd on 16 and 4 of the host's CPU cores vs scipy with
            # as many threads and ScaLAPACK (carry .venv/scalapack/debs, .whl)
    t0=$SECONDS
    graph_checks 120
    step solvers
    timeout 70 python3 benchmarks/solvers.py --gpu --n 4096 --spectral-n 2048 --repeats 2 2>&1 \
        | tee "$OUT/r3f_solvers_gpu.log" | tail -10
    export DMATH_DEVICE=cpu
    python3 benchmarks/solvers.py --fetch-scalapack > /dev/null 2>&1
    for p in 16 4; do
      step "spectral, $p ranks"
      timeout 140 python3 benchmarks/solvers.py --spectral --ranks $p --sizes 2048 --nb 64 --repeats 1 \
          2>&1 | tee "$OUT/r3f_spectral_$p.log" | tail -10
    done
    step "done after $((SECONDS - t0)) s"
    ;;
  round3g)  # < 300 s: the GPU kernels inside a replayed step (dmath vs torch's whole-step graph),
            # then where eigh / svd spend their time on 16 and 4 of the host's CPU cores
    t0=$SECONDS
    step kernels
    timeout 120 python3 benchmarks/step_kernels.py --models lenet,resnet --replays 50 --top 30 2>&1 \
        | tee "$OUT/r3g_kernels.log" | grep -v "^| " | tail -6
    export DMATH_DEVICE=cpu OMP_NUM_THREADS=1
    for p in 16 4; do for r in eigh svd; do
      step "phases, $r, $p ranks"
      timeout 60 mpiexec -n $p --bind-to none python3 -m mpi4py benchmarks/spectral_phases.py \
          --routine $r --n 2048 --repeats 1 2>&1 | tee "$OUT/r3g_phases_${r}_$p.log" | tail -9
    done; done
    step "done after $((SECONDS - t0)) s"
    ;;
  round3h)  # < 250 s: the captured-step tests on CUDA, host time and replay (graph_host.py), the
            # kernels inside a LeNet replay (step_kernels.py)
    t0=$SECONDS
    graph_checks 120
    step kernels
    timeout 90 python3 benchmarks/step_kernels.py --models lenet --replays 50 --top 40 2>&1 \
        | tee "$OUT/r3h_kernels.log" | grep -v "^| " | tail -4
    step "done after $((SECONDS - t0)) s"
    ;;
  round3j)  # < 400 s: the captured-step tests on CUDA and graph_host.py (float32 step values),
            # the kernels inside a LeNet replay, GPU solvers; the host's MKL on tall, narrow products
    t0=$SECONDS
    graph_checks 150
    step kernels
    timeout 90 python3 benchmarks/step_kernels.py --models lenet --replays 50 --top 40 2>&1 \
        | tee "$OUT/r3j_kernels.log" | grep -v "^| " | tail -4
    step solvers
    timeout 70 python3 benchmarks/solvers.py --gpu --n 4096 --spectral-n 2048 --repeats 2 2>&1 \
        | tee "$OUT/r3j_solvers_gpu.log" | tail -10
    step skinny
    DMATH_DEVICE=cpu timeout 60 python3 benchmarks/skinny_gemm.py 2>&1 | tee "$OUT/r3j_skinny.log"
    step "done after $((SECONDS - t0)) s"
    ;;
  round3k)  # < 560 s, the host's CPUs: eigh / svd vs scipy threads and ScaLAPACK on 16 and 4 ranks
            # at n = 2048, then 16 ranks at n = 4096 (carry .venv/scalapack/debs, .whl)
    export DMATH_DEVICE=cpu
    t0=$SECONDS
    python3 benchmarks/solvers.py --fetch-scalapack > /dev/null 2>&1
    for pn in "16 2048 130 x" "4 2048 130 x" "16 4096 240 --no-single"; do set -- $pn
      step "spectral, $1 ranks, n = $2"
      timeout $3 python3 benchmarks/solvers.py --spectral --ranks $1 --sizes $2 --nb 64 --repeats 1 \
          --no-doc ${4%x} 2>&1 | tee "$OUT/r3k_spectral_$1_$2.log" | tail -10
    done
    step "done after $((SECONDS - t0)) s"
    ;;
  round3l)  # < 560 s, the host's CPUs: eigh / svd on 4 ranks (n = 2048), eigvalsh / svdvals on 16
            # (n = 4096), then eigvalsh, svdvals, eigh on 16 ranks at n = 8192, one cold run each
            # (carry .venv/scalapack/debs, .whl)
    export DMATH_DEVICE=cpu
    t0=$SECONDS
    python3 benchmarks/solvers.py --fetch-scalapack > /dev/null 2>&1
    step "spectral, 4 ranks, n = 2048"
    timeout 170 python3 benchmarks/solvers.py --spectral --ranks 4 --sizes 2048 --nb 64 --repeats 1 \
        --no-doc --no-single 2>&1 | tee "$OUT/r3l_spectral_4_2048.log" | tail -4
    step "eigvalsh, svdvals, 16 ranks, n = 4096"
    timeout 70 python3 benchmarks/solvers.py --spectral --ranks 16 --sizes 4096 --nb 64 --repeats 1 \
        --no-doc --no-single --routines eigvalsh,svdvals 2>&1 | tee "$OUT/r3l_spectral_16_4096.log" | tail -2
    for r in eigvalsh svdvals eigh; do
      step "$r, 16 ranks, n = 8192"
      timeout $((555 - SECONDS + t0)) python3 benchmarks/solvers.py --spectral --ranks 16 --sizes 8192 \
          --nb 64 --repeats 0 --no-doc --no-single --routines $r 2>&1 | tee "$OUT/r3l_${r}_16_8192.log" | tail -1
    done
    step "done after $((SECONDS - t0)) s"
    ;;
  round3m)  # < 425 s, the host's CPUs: the compiled lower-triangle product (eigh) and
            # dsytrd_sb2st (eigvalsh): 4 ranks n = 2048, 16 ranks n = 2048 / 4096 / 8192 (cold);
            # then, as time allows, phases on 16 ranks and cholesky / lu / qr on 4 ranks
            # (carry .venv/scalapack/debs, .whl)
    export DMATH_DEVICE=cpu
    t0=$SECONDS
    left() { echo $((420 - SECONDS + t0)); }
    which cc gcc; cc --version 2>&1 | head -1
    python3 -c "from dmath.linalg import native; print('native kernels:', native.library())"
    python3 benchmarks/solvers.py --fetch-scalapack > /dev/null 2>&1
    step "eigh, eigvalsh, 4 ranks, n = 2048"
    timeout 60 python3 benchmarks/solvers.py --spectral --ranks 4 --sizes 2048 --nb 64 --repeats 1 \
        --no-doc --no-single --routines eigh,eigvalsh 2>&1 | tee "$OUT/r3m_spectral_4_2048.log" | tail -3
    step "eigh, eigvalsh, 16 ranks, n = 2048, 4096"
    timeout 100 python3 benchmarks/solvers.py --spectral --ranks 16 --sizes 2048,4096 --nb 64 --repeats 1 \
        --no-doc --no-single --routines eigh,eigvalsh 2>&1 | tee "$OUT/r3m_spectral_16.log" | tail -5
    for r in eigvalsh eigh; do
      step "$r, 16 ranks, n = 8192"
      timeout $(left) python3 benchmarks/solvers.py --spectral --ranks 16 --sizes 8192 \
          --nb 64 --repeats 0 --no-doc --no-single --routines $r 2>&1 | tee "$OUT/r3m_${r}_16_8192.log" | tail -1
    done
    for r in eigvalsh eigh; do
      step "$r phases, 16 ranks, n = 4096"
      OMP_NUM_THREADS=1 timeout $(( $(left) < 40 ? $(left) : 40 )) mpiexec -n 16 --bind-to none python3 \
          -m mpi4py benchmarks/spectral_phases.py --routine $r --n 4096 2>&1 | tee "$OUT/r3m_phases_$r.log" | tail -9
    done
    step "cholesky, lu, qr, 4 ranks, n = 4096"
    timeout $(left) python3 benchmarks/solvers.py --ranks 4 --n 4096 --lookahead on --no-openblas \
        --no-single --no-doc 2>&1 | tee "$OUT/r3m_solvers_4.log" | tail -12
    step "done after $((SECONDS - t0)) s"
    ;;
  round3o)  # < 480 s: the host's CPU topology; graph_host.py --gpu with a cProfile of dmath's
            # host step; the 16-core data-parallel step (fused AdamW, torch fused baseline);
            # eigvalsh with rank 0 alone running band -> values (16 ranks); eigh on 16 ranks at
            # n = 2048 with the compiled product on and off in one job (carry
            # .venv/scalapack/debs, .whl)
    t0=$SECONDS
    left() { echo $((470 - SECONDS + t0)); }
    lscpu | grep -E "^(Model name|Socket|Core|Thread|CPU\(s\)|L[23]|NUMA node\(s\))"
    step "graph host time, LeNet, profiled"
    timeout 100 python3 benchmarks/graph_host.py --gpu --models lenet --steps 300 --profile 300 \
        2>&1 | tee "$OUT/r3o_graph_host.log" | tail -32
    step "optimizer units on CUDA (the fused Adam / AdamW step)"
    timeout 90 python3 -m pytest -q -x -p no:cacheprovider tests/test_train.py -k units 2>&1 \
        | tee "$OUT/r3o_units_cuda.log" | tail -2
    export DMATH_DEVICE=cpu
    dp_step r3o_dp.log
    step "one thread: batch 8 and batch 128 (dmath, torch default / foreach / fused)"
    for b in 8 128; do
      timeout 60 python3 benchmarks/train_overhead.py --models lenet --batch $b --threads 1 \
          --steps $((b == 8 ? 60 : 12)) 2>&1 | tee -a "$OUT/r3o_dp.log" | tail -4
    done
    python3 benchmarks/solvers.py --fetch-scalapack > /dev/null 2>&1
    for nat in 1 0; do
      step "eigh, 16 ranks, n = 2048, DMATH_NATIVE=$nat"
      DMATH_NATIVE=$nat timeout 60 python3 benchmarks/solvers.py --spectral --ranks 16 --sizes 2048 \
          --nb 64 --repeats 1 --no-doc --no-single --routines eigh 2>&1 | tee "$OUT/r3o_eigh_$nat.log" | tail -1
      DMATH_NATIVE=$nat OMP_NUM_THREADS=1 timeout 30 mpiexec -n 16 --bind-to none python3 -m mpi4py \
          benchmarks/spectral_phases.py --routine eigh --n 2048 2>&1 | tee "$OUT/r3o_phases_$nat.log" | tail -7
    done
    step "eigvalsh phases, 16 ranks, n = 4096"
    OMP_NUM_THREADS=1 timeout 30 mpiexec -n 16 --bind-to none python3 -m mpi4py \
        benchmarks/spectral_phases.py --routine eigvalsh --n 4096 2>&1 | tee "$OUT/r3o_phases.log" | tail -7
    step "eigvalsh, 16 ranks, n = 2048, 4096"
    timeout $(( $(left) < 80 ? $(left) : 80 )) python3 benchmarks/solvers.py --spectral --ranks 16 \
        --sizes 2048,4096 --nb 64 --repeats 1 --no-doc --no-single --routines eigvalsh 2>&1 \
        | tee "$OUT/r3o_eigvalsh.log" | tail -2
    step "eigvalsh, 16 ranks, n = 8192"
    timeout $(left) python3 benchmarks/solvers.py --spectral --ranks 16 --sizes 8192 \
        --nb 64 --repeats 0 --no-doc --no-single --routines eigvalsh 2>&1 | tee "$OUT/r3o_8192.log" | tail -1
    step "done after $((SECONDS - t0)) s"
    ;;
  round3z)  # < 330 s: the solver and look-ahead tests on CUDA (1-4 ranks sharing the GPU: Cholesky's
            # gather started during the update, on the staged transport), then training on this GPU
            # (LeNet and ResNet: dmath with and without graphs, torch eager, torch whole-step graph)
    t0=$SECONDS
    step "solver tests on CUDA"
    timeout 170 python3 -m pytest -q -p no:cacheprovider tests/test_solvers.py tests/test_lookahead.py \
        > "$OUT/r3z_tests.log" 2>&1; tail -3 "$OUT/r3z_tests.log"
    step train; synthetic_fm
    timeout $((330 - SECONDS + t0)) python3 benchmarks/train.py --gpu --data /tmp/fm.npz --models lenet,resnet \
        --epochs 2 --systems dmath,dmath-eager,torch,torch-graph --no-doc 2>&1 | tee "$OUT/r3z_train.log" | tail -4
    step "done after $((SECONDS - t0)) s"
    ;;
  round3ac)  # < 540 s, the GPU: the eager step's host and wall time with a profile (LeNet and
             # ResNet, batch 128), training (dmath with and without graphs, torch eager, torch's
             # whole-step graph), one bf16 matmul call vs torch; then CG at n = 16384 on 16 CPU ranks
    t0=$SECONDS
    step "eager step"
    timeout 150 python3 benchmarks/train_overhead.py --gpu --batch 128 --models lenet,resnet \
        --steps 60 --no-graphs --profile 30 2>&1 | tee "$OUT/r3ac_eager.log" | grep "^|"
    step train; synthetic_fm
    timeout 200 python3 benchmarks/train.py --gpu --data /tmp/fm.npz --models lenet,resnet \
        --epochs 2 --systems dmath,dmath-eager,torch,torch-graph --no-doc 2>&1 | tee "$OUT/r3ac_train.log" | tail -6
    step "one matmul call"
    timeout 50 python3 benchmarks/gemm_call.py --gpu 2>&1 | tee "$OUT/r3ac_gemm_call.log" | tail -6
    step "CG, power iteration on 16 CPU ranks"       # what is left of 540 s
    DMATH_DEVICE=cpu timeout $((540 - SECONDS + t0)) python3 benchmarks/iterative.py --n 16384 \
        --ranks 16 --repeat 3 --no-doc 2>&1 | tee "$OUT/r3ac_iterative.log" | tail -3
    step "done after $((SECONDS - t0)) s"
    ;;
  round3ad)  # < 420 s, the host's CPUs: CG / power iteration at n = 16384 on 16 ranks vs numpy
             # with 16 threads, the 16- and 4-rank data-parallel step, LU on 4 ranks (n = 4096)
             # with nb 128 and 256 vs scipy 4 threads
    export DMATH_DEVICE=cpu; t0=$SECONDS
    step "CG, power iteration"
    timeout 150 python3 benchmarks/iterative.py --n 16384 --ranks 16 --repeat 3 --no-doc 2>&1 \
        | tee "$OUT/r3ad_iterative.log" | tail -3
    dp_step r3ad_dp.log
    step "LU block sizes, 4 ranks"
    for nb in 128 256; do
      timeout 60 python3 benchmarks/solvers.py --ranks 4 --n 4096 --nb $nb --routines lu,cholesky \
          --no-openblas --no-single --no-doc --repeats 2 2>&1 | tee -a "$OUT/r3ad_solvers.log" | tail -4
    done
    step "done after $((SECONDS - t0)) s"
    ;;
  round3ae)  # < 260 s, the host's CPUs: a GEMM between torch ops with 16 threads (torch's kernel
             # vs OpenBLAS's), LU / Cholesky over panels with 16 threads, the 16-thread
             # single-process LeNet / ResNet step (dmath as it picks, with OpenBLAS forced, torch)
    export DMATH_DEVICE=cpu; t0=$SECONDS
    step "GEMM between torch ops, 16 threads"
    timeout 60 python3 benchmarks/threaded_gemm.py --threads 16 2>&1 | tee "$OUT/r3ae_threaded_gemm.log"
    timeout 60 python3 benchmarks/threaded_gemm.py --threads 16 --panels --n 4096 2>&1 \
        | tee -a "$OUT/r3ae_threaded_gemm.log" | tail -4
    step "16-thread step"
    timeout 60 python3 benchmarks/train_overhead.py --models lenet,resnet --batch 128 --threads 16 \
        --steps 20 2>&1 | tee "$OUT/r3ae_step16.log" | grep "^|"
    step "16-thread step, OpenBLAS forced"
    DMATH_CPU_GEMM=blas timeout 60 python3 benchmarks/train_overhead.py --models lenet --batch 128 \
        --threads 16 --steps 20 2>&1 | tee "$OUT/r3ae_step16_blas.log" | grep "^|"
    step "done after $((SECONDS - t0)) s"
    ;;
  eager)  # < 200 s: the eager (graphs off) training step on this GPU, LeNet and ResNet at batch
          # 128: host and wall us per step of dmath and torch, and a cProfile of dmath's steps
    timeout 200 python3 benchmarks/train_overhead.py --gpu --batch 128 --models lenet,resnet \
        --steps 100 --no-graphs --profile 50 2>&1 | tee "$OUT/eager_overhead.log" | grep "^|"
    ;;
  round3ab)  # < R3AB_SECONDS (default 420) s, the GPU only: training (LeNet and ResNet: dmath
             # with and without graphs, torch eager, torch whole-step graph), one bf16 matmul
             # call vs torch, the solvers (cholesky, lu, qr, eigh, svd) vs torch.linalg:
             # issue 17's and 19's GPU rows
    t0=$SECONDS
    step train; synthetic_fm
    timeout 240 python3 benchmarks/train.py --gpu --data /tmp/fm.npz --models lenet,resnet \
        --epochs 2 --systems dmath,dmath-eager,torch,torch-graph --no-doc 2>&1 | tee "$OUT/r3ab_train.log" | tail -6
    step "one matmul call"
    timeout 60 python3 benchmarks/gemm_call.py --gpu 2>&1 | tee "$OUT/r3ab_gemm_call.log" | tail -8
    step "solvers on the GPU"
    timeout $((${R3AB_SECONDS:-420} - SECONDS + t0)) python3 benchmarks/solvers.py --gpu --n 4096 --spectral-n 2048 \
        --repeats 2 --no-doc 2>&1 | tee "$OUT/r3ab_solvers.log" | tail -14
    step "done after $((SECONDS - t0)) s"
    ;;
  round3aa)  # < 480 s: the host's CPUs: LU's per-phase times on 4 ranks (n = 4096) and 16 (n =
             # 8192), LU and Cholesky against scipy with as many threads on 16 ranks (n = 8192;
             # grid_shapes.py --scipy) and on 4 (n = 4096; solvers.py); then the solver and
             # look-ahead tests on CUDA (1-4 ranks sharing the GPU, staged transport)
    t0=$SECONDS
    export DMATH_DEVICE=cpu
    for rn in "4 4096" "16 8192"; do
      set -- $rn
      step "factor phases, lu, $1 ranks, n = $2"
      OMP_NUM_THREADS=1 timeout 60 mpiexec -n $1 --bind-to none python3 -m mpi4py benchmarks/factor_phases.py \
          --routine lu --n $2 --nb 128 --repeats 2 > "$OUT/r3aa_phases_lu_$1.log" 2>&1; tail -12 "$OUT/r3aa_phases_lu_$1.log"
    done
    step "16 ranks, n = 8192, vs scipy 16 threads"
    timeout 120 python3 benchmarks/grid_shapes.py --ranks 16 --n 8192 --shapes 4x4 --routines lu,cholesky \
        --repeats 2 --scipy 2>&1 | tee "$OUT/r3aa_16.log" | tail -5
    step "solvers.py, 4 ranks"
    timeout 100 python3 benchmarks/solvers.py --ranks 4 --n 4096 --routines lu,cholesky --no-doc \
        > "$OUT/r3aa_solvers4.log" 2>&1; echo "solvers rc $?"; tail -25 "$OUT/r3aa_solvers4.log"
    export DMATH_DEVICE=cuda
    step "solver tests on CUDA"
    timeout $((480 - SECONDS + t0)) python3 -m pytest -q -p no:cacheprovider tests/test_solvers.py \
        tests/test_lookahead.py > "$OUT/r3aa_tests.log" 2>&1; tail -3 "$OUT/r3aa_tests.log"
    step "done after $((SECONDS - t0)) s"
    ;;
  round3y)  # < 580 s: the host's CPUs first: per-phase times of LU and Cholesky on 4 ranks (n =
            # 4096) and of Cholesky on 16 (n = 8192), LU / Cholesky on 16 ranks by block size,
            # solvers.py on 4 ranks (whole log); then this GPU: training (LeNet and ResNet: dmath
            # with and without graphs, torch eager, torch whole-step graph; synthetic data), one
            # bf16 matmul call vs torch
    t0=$SECONDS
    left() { echo $((580 - SECONDS + t0)); }
    export DMATH_DEVICE=cpu
    phases() {  # $1 ranks, $2 routine, $3 n
      step "factor phases, $2, $1 ranks, n = $3"
      OMP_NUM_THREADS=1 timeout 60 mpiexec -n $1 --bind-to none python3 -m mpi4py benchmarks/factor_phases.py \
          --routine $2 --n $3 --nb 128 --repeats 2 > "$OUT/r3y_phases_$2_$1.log" 2>&1; tail -12 "$OUT/r3y_phases_$2_$1.log"
    }
    phases 4 lu 4096; phases 4 cholesky 4096; phases 16 cholesky 8192
    for nb in 64 96 128; do
      step "16 ranks, n = 8192, nb = $nb"
      timeout 60 python3 benchmarks/grid_shapes.py --ranks 16 --n 8192 --nb $nb --shapes 4x4 \
          --routines cholesky,lu --repeats 2 2>&1 | tee -a "$OUT/r3y_nb16.log" | tail -4
    done
    step "solvers.py, 4 ranks"
    timeout 100 python3 benchmarks/solvers.py --ranks 4 --n 4096 --routines lu,cholesky --no-doc \
        > "$OUT/r3y_solvers4.log" 2>&1; echo "solvers rc $?"; tail -25 "$OUT/r3y_solvers4.log"
    export DMATH_DEVICE=cuda
    step "matmul call"
    timeout 50 python3 benchmarks/gemm_call.py --gpu 2>&1 | tee "$OUT/r3y_gemm_call.log" | tail -6
    step train; synthetic_fm
    timeout $(left) python3 benchmarks/train.py --gpu --data /tmp/fm.npz --models lenet,resnet --epochs 2 \
        --systems dmath,dmath-eager,torch,torch-graph --no-doc 2>&1 | tee "$OUT/r3y_train.log" | tail -10
    step "done after $((SECONDS - t0)) s"
    ;;
  round3x)  # < 420 s, the host's CPUs only: LU / QR / Cholesky / eigh on each grid shape over the
            # same ranks next to scipy with as many threads (4 ranks n = 4096 and 1024; 16 ranks
            # n = 8192 and 4096), the data-parallel LeNet step by ranks x threads
    export DMATH_DEVICE=cpu
    G="python3 benchmarks/grid_shapes.py"
    step "grid shapes, 4 ranks"
    timeout 150 $G --ranks 4 --n 4096 --shapes 2x2,1x4,4x1 --routines lu,qr,cholesky --scipy 2>&1 \
        | tee "$OUT/r3x_grid4.log"
    timeout 40 $G --ranks 4 --n 1024 --shapes 2x2,1x4,4x1 --routines lu,qr 2>&1 | tee -a "$OUT/r3x_grid4.log"
    step "grid shapes, 16 ranks"
    timeout 180 $G --ranks 16 --n 8192 --shapes 4x4,2x8,1x16 --routines lu,cholesky --repeats 3 --scipy \
        2>&1 | tee "$OUT/r3x_grid16.log"
    timeout 60 $G --ranks 16 --n 4096 --shapes 4x4,2x8,1x16 --routines lu,qr --repeats 3 2>&1 \
        | tee -a "$OUT/r3x_grid16.log"
    timeout 120 $G --ranks 4 --n 4096 --nb 64 --shapes 2x2,1x4 --routines eigh --repeats 2 2>&1 \
        | tee -a "$OUT/r3x_grid4.log"
    DP_ROUNDS=3 dp_step r3x_dp.log "16 1 8" "8 2 16" "4 4 32"      # ranks x threads
    ;;
  round3w)  # < 420 s: round3v's GPU part again after its fixes: the CUDA optimizer units and
            # StepValues ring, the captured-step worker, the LeNet graph step's host time and
            # kernels next to torch's graphs (capturable; fused + capturable), train.py LeNet
            # graphs on synthetic data
    t0=$SECONDS
    left() { echo $((${R3W_SECONDS:-420} - SECONDS + t0)); }
    step "optimizer units and the StepValues ring on CUDA"
    timeout 100 python3 -m pytest -q -x -p no:cacheprovider tests/test_train.py -k "units or accumulate" \
        2>&1 | tee "$OUT/r3w_units.log" | tail -2
    step "the captured-step worker on CUDA"
    mkdir -p "$OUT/r3w_tmp"
    timeout 150 python3 tests/workers/train_graphs.py "$OUT/r3w_tmp" cuda \
        > "$OUT/r3w_train_graphs.log" 2>&1; echo "train_graphs rc $?"
    rm -rf "$OUT/r3w_tmp"; tail -n 3 "$OUT/r3w_train_graphs.log"
    graph_step_gpu r3w
    if [ "$(left)" -gt 60 ]; then
      step "train.py LeNet graphs vs torch's graph, synthetic data"
      synthetic_fm
      timeout $(left) python3 benchmarks/train.py --gpu --data /tmp/fm.npz --epochs 2 --models lenet \
          --systems dmath,torch-graph --no-doc 2>&1 | tee "$OUT/r3w_train.log" | tail -4
    fi
    step "done after $((SECONDS - t0)) s"
    ;;
  round3v)  # < R3V_SECONDS (default 560) s, most needed first: the CUDA optimizer units, the
            # StepValues ring and the captured-step worker (fused AdamW captured); the LeNet
            # graph step's host time and kernels next to torch's graph with capturable and with
            # fused AdamW; eager steps (graphs off) vs torch eager on synthetic Fashion-MNIST-
            # shaped data; the data-parallel step on 16 and 4 ranks vs one torch process with 16
            # / 4 threads; cholesky / lu / eigh on 4 ranks (carry .whl, .venv/scalapack/debs)
    t0=$SECONDS
    left() { echo $((${R3V_SECONDS:-560} - SECONDS + t0)); }
    step "optimizer units and the StepValues ring on CUDA"
    timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_train.py -k "units or accumulate" \
        2>&1 | tee "$OUT/r3v_units.log" | tail -2
    graph_step_gpu r3v
    step "the captured-step worker on CUDA"
    mkdir -p "$OUT/r3v_tmp"
    timeout $(( $(left) > 150 ? 150 : $(left) )) python3 tests/workers/train_graphs.py "$OUT/r3v_tmp" cuda \
        > "$OUT/r3v_train_graphs.log" 2>&1; echo "train_graphs rc $?"
    rm -rf "$OUT/r3v_tmp"; tail -n 3 "$OUT/r3v_train_graphs.log"
    if [ "$(left)" -gt 200 ]; then
      step "eager steps (graphs off) and graphs vs torch, synthetic data, 2 epochs"
      synthetic_fm
      timeout 150 python3 benchmarks/train.py --gpu --data /tmp/fm.npz --epochs 2 \
          --systems dmath,dmath-eager,torch,torch-graph --no-doc 2>&1 | tee "$OUT/r3v_train.log" | tail -8
    fi
    export DMATH_DEVICE=cpu
    if [ "$(left)" -gt 110 ]; then
      dp_step r3v_dp.log
      step "one torch process, 4 threads, batch 128"
      timeout 40 python3 benchmarks/train_overhead.py --models lenet --batch 128 --threads 4 --steps 30 \
          2>&1 | tee -a "$OUT/r3v_dp.log" | tail -4
    fi
    python3 benchmarks/solvers.py --fetch-scalapack > /dev/null 2>&1
    if [ "$(left)" -gt 80 ]; then
      step "cholesky, lu on 4 ranks (2 x 2) vs scipy with 4 threads, n = 4096"
      timeout 75 python3 benchmarks/solvers.py --ranks 4 --n 4096 --routines cholesky,lu \
          --lookahead on --no-openblas --no-single --no-doc --repeats 2 2>&1 \
          | tee "$OUT/r3v_solvers4.log" | tail -9
    fi
    if [ "$(left)" -gt 60 ]; then
      step "eigh, 4 ranks, n = 2048 and 4096, vs ScaLAPACK and scipy 4 threads"
      timeout $(left) python3 benchmarks/solvers.py --spectral --ranks 4 --sizes 2048,4096 --nb 64 \
          --repeats 1 --no-doc --no-single --routines eigh 2>&1 | tee "$OUT/r3v_eigh4.log" | tail -4
    fi
    step "done after $((SECONDS - t0)) s"
    ;;
  round3u)  # < R3U_SECONDS (default 430) s, most needed first: the CUDA dropout-mask kernel's
            # test, the LeNet replay's host time and kernels, the 16-core data-parallel step
            # (compiled max pooling off / on), eigh on 16 ranks (the compiled column loop),
            # band.symmetric before / after on 16
            # host ranks at n = 4096 (benchmarks/band_ab.py against ab_band_old.py, made first by
            # `git show 5b8a725:dmath/linalg/band.py > ab_band_old.py`: untracked, it travels
            # with the tree), eigvalsh at n = 8192 on 16 ranks, cholesky / lu on 4 ranks vs
            # scipy with 4 threads, AdamW on the GPU, the band at
            # 8192, the captured-step worker on CUDA (carry .whl, .venv/scalapack/debs)
    t0=$SECONDS
    left() { echo $((${R3U_SECONDS:-430} - SECONDS + t0)); }
    step "the dropout-mask kernel on CUDA"
    timeout 60 python3 -m pytest -q -x -p no:cacheprovider tests/test_eager_step.py -k kernel_cuda \
        2>&1 | tee "$OUT/r3u_kernel.log" | tail -2
    step "graph host time and steps, LeNet"
    timeout 60 python3 benchmarks/graph_host.py --gpu --models lenet --steps 300 2>&1 \
        | tee -a "$OUT/r3u_graph_host.log" | tail -2
    step "the kernels of a LeNet replay"
    timeout 50 python3 benchmarks/step_kernels.py --models lenet --replays 50 --top 30 2>&1 \
        | tee "$OUT/r3u_kernels.log" | grep -E "kernels,|jit|bits|Long" | head -12
    export DMATH_DEVICE=cpu
    if [ "$(left)" -gt 150 ]; then              # the compiled max pooling, the gradient sums' wait
      step "data-parallel step, 16 x 8, DMATH_NATIVE=0 (torch's max pooling)"
      DMATH_NATIVE=0 timeout 50 python3 -c 'import sys; from dmath.cli import main; sys.exit(main(sys.argv[1:]))' \
          run -n 16 benchmarks/train_overhead.py --models lenet --data-parallel --batch 8 \
          --rounds 5 --steps 20 2>&1 | tee -a "$OUT/r3u_dp.log" | tail -1
      dp_step r3u_dp.log
    fi
    python3 benchmarks/solvers.py --fetch-scalapack > /dev/null 2>&1
    if [ "$(left)" -gt 120 ]; then              # the compiled column loop of the reduction
      step "eigh, 16 ranks, n = 2048 and 4096, vs ScaLAPACK and scipy"
      timeout 100 python3 benchmarks/solvers.py --spectral --ranks 16 --sizes 2048,4096 --nb 64 \
          --repeats 1 --no-doc --no-single --routines eigh 2>&1 | tee "$OUT/r3u_eigh.log" | tail -4
    fi
    if [ "$(left)" -gt 100 ]; then              # the compiled bidiagonal loop
      step "svd, 16 ranks, n = 2048, vs ScaLAPACK and scipy"
      timeout 80 python3 benchmarks/solvers.py --spectral --ranks 16 --sizes 2048 --nb 64 \
          --repeats 1 --no-doc --no-single --routines svd,svdvals 2>&1 | tee "$OUT/r3u_svd.log" | tail -3
    fi
    step "band.symmetric old / new, 16 ranks, n = 4096"
    OMP_NUM_THREADS=1 timeout 60 mpiexec -n 16 --bind-to none python3 -m mpi4py benchmarks/band_ab.py 4096 3 \
        ab_band_old.py 2>&1 | tee -a "$OUT/r3u_ab.log" | tail -1
    if [ "$(left)" -gt 100 ]; then
      step "eigvalsh, 16 ranks, n = 8192"
      timeout 90 python3 benchmarks/solvers.py --spectral --ranks 16 --sizes 8192 --nb 64 \
          --repeats 0 --no-doc --no-single --routines eigvalsh 2>&1 | tee "$OUT/r3u_eigvalsh.log" | tail -1
    fi
    if [ "$(left)" -gt 80 ]; then
      step "cholesky, lu on 4 ranks (2 x 2) vs scipy with 4 threads, n = 4096"
      timeout 75 python3 benchmarks/solvers.py --ranks 4 --n 4096 --routines cholesky,lu \
          --lookahead on --no-openblas --no-single --no-doc --repeats 2 2>&1 \
          | tee "$OUT/r3u_solvers4.log" | tail -9
    fi
    export DMATH_DEVICE=cuda
    if [ "$(left)" -gt 30 ]; then
      step "AdamW on the GPU"
      timeout 30 python3 benchmarks/cpu_kernels.py --device cuda 2>&1 | tee "$OUT/r3u_adamw.log" | tail -3
    fi
    if [ "$(left)" -gt 60 ]; then
      step "band.symmetric old / new, 16 ranks, n = 8192"
      DMATH_DEVICE=cpu OMP_NUM_THREADS=1 timeout $(left) mpiexec -n 16 --bind-to none python3 \
          -m mpi4py benchmarks/band_ab.py 8192 1 ab_band_old.py 2>&1 | tee -a "$OUT/r3u_ab.log" | tail -1
    fi
    if [ "$(left)" -gt 60 ]; then
      step "the captured-step worker on CUDA"
      mkdir -p "$OUT/r3u_tmp"
      timeout $(left) python3 tests/workers/train_graphs.py "$OUT/r3u_tmp" cuda \
          > "$OUT/r3u_train_graphs.log" 2>&1; echo "train_graphs rc $?"
      rm -rf "$OUT/r3u_tmp"; tail -n 3 "$OUT/r3u_train_graphs.log"
    fi
    step "done after $((SECONDS - t0)) s"
    ;;
  round3q)  # < 280 s, round3o's first part when little device time is left: CPU topology, the
            # CUDA check of fused Adam / AdamW, the profiled graph host step, eigh on 16 ranks
            # at n = 2048 with the compiled product on and off (carry .venv/scalapack/debs, .whl)
    t0=$SECONDS
    lscpu | grep -E "^(Model name|Socket|Core|Thread|CPU\(s\)|L[23]|NUMA node\(s\))"
    step "optimizer units on CUDA (fused=True)"
    timeout 80 python3 -m pytest -q -x -p no:cacheprovider tests/test_train.py -k units 2>&1 \
        | tee "$OUT/r3q_units_cuda.log" | tail -2
    step "graph host time, LeNet, profiled"
    timeout 70 python3 benchmarks/graph_host.py --gpu --models lenet --steps 200 --profile 200 \
        2>&1 | tee "$OUT/r3q_graph_host.log" | tail -30
    export DMATH_DEVICE=cpu
    python3 benchmarks/solvers.py --fetch-scalapack > /dev/null 2>&1
    for nat in 1 0; do
      step "eigh, 16 ranks, n = 2048, DMATH_NATIVE=$nat"
      DMATH_NATIVE=$nat timeout $((270 - SECONDS + t0 > 55 ? 55 : 270 - SECONDS + t0)) python3 \
          benchmarks/solvers.py --spectral --ranks 16 --sizes 2048 --nb 64 --repeats 1 --no-doc \
          --no-single --routines eigh 2>&1 | tee "$OUT/r3q_eigh_$nat.log" | tail -1
    done
    step "done after $((SECONDS - t0)) s"
    ;;
  round3r)  # < 200 s: the graph step's host time after the kept CUDA stream (graph_host.py, LeNet),
            # then the captured-step worker on CUDA (graphs train as eager steps do)
    t0=$SECONDS
    timeout 60 python3 benchmarks/graph_host.py --gpu --models lenet --steps 300 2>&1 \
        | tee "$OUT/r3r_graph_host.log" | tail -3
    mkdir -p "$OUT/r3r_tmp"
    timeout $((190 - SECONDS + t0)) python3 tests/workers/train_graphs.py "$OUT/r3r_tmp" cuda \
        > "$OUT/r3r_train_graphs.log" 2>&1; echo "train_graphs rc $?"
    rm -rf "$OUT/r3r_tmp"; tail -n 3 "$OUT/r3r_train_graphs.log"
    step "done after $((SECONDS - t0)) s"
    ;;
  round3n)  # < 150 s, the host's CPUs: eigvalsh with rank 0 alone running band -> values, on
            # 16 ranks (phases at n = 4096; n = 4096 and 8192 vs scipy and ScaLAPACK)
    export DMATH_DEVICE=cpu
    t0=$SECONDS
    python3 benchmarks/solvers.py --fetch-scalapack > /dev/null 2>&1
    step "eigvalsh phases, 16 ranks, n = 4096"
    OMP_NUM_THREADS=1 timeout 30 mpiexec -n 16 --bind-to none python3 -m mpi4py \
        benchmarks/spectral_phases.py --routine eigvalsh --n 4096 2>&1 | tee "$OUT/r3n_phases.log" | tail -7
    step "eigvalsh, 16 ranks, n = 4096"
    timeout 40 python3 benchmarks/solvers.py --spectral --ranks 16 --sizes 4096 --nb 64 --repeats 1 \
        --no-doc --no-single --routines eigvalsh 2>&1 | tee "$OUT/r3n_4096.log" | tail -1
    step "eigvalsh, 16 ranks, n = 8192"
    timeout $((140 - SECONDS + t0)) python3 benchmarks/solvers.py --spectral --ranks 16 --sizes 8192 \
        --nb 64 --repeats 0 --no-doc --no-single --routines eigvalsh 2>&1 | tee "$OUT/r3n_8192.log" | tail -1
    step "done after $((SECONDS - t0)) s"
    ;;
  round3i)  # < 200 s, the host's CPUs: eigvalsh / svdvals against the band width on 16 and 4 ranks
    export DMATH_DEVICE=cpu OMP_NUM_THREADS=1
    t0=$SECONDS
    for p in 16 4; do
      step "band width, $p ranks"
      timeout 90 mpiexec -n $p --bind-to none python3 -m mpi4py benchmarks/band_width.py --n 2048 \
          --widths 8,16,32,64 2>&1 | tee "$OUT/r3i_band_$p.log" | tail -7
    done
    step "done after $((SECONDS - t0)) s"
    ;;
  round3e)  # < 560 s, what one late call can hold: training on the GPU (LeNet and ResNet: dmath
            # with and without graphs, torch eager, torch whole-step graph), then the 16-core
            # data-parallel step (16 x 8, 4 x 32 images, one torch process with 16 threads) and
            # client-server latency on the CPUs; carry data/gz, .whl
    [ -d data/gz/fashion-mnist ] && export DMATH_DATA=data/gz
    t0=$SECONDS
    step train
    timeout 250 python3 benchmarks/train.py --gpu --models lenet,resnet --epochs 2 \
        --systems dmath,dmath-eager,torch,torch-graph --no-doc 2>&1 | tee "$OUT/r3e_train.log" | tail -8
    export DMATH_DEVICE=cpu
    dp_step r3e_dp.log
    timeout 40 python3 benchmarks/train_overhead.py --models lenet --batch 8 --threads 1 --steps 50 \
        2>&1 | tee -a "$OUT/r3e_dp.log" | tail -6
    step dispatch
    timeout 80 python3 benchmarks/dispatch.py --ranks 2 --ops "A + 1" "sum(A)" "float(sum(A))" \
        --no-doc 2>&1 | tee "$OUT/r3e_dispatch.log" | tail -12
    step "done after $((SECONDS - t0)) s"
    ;;
  cpu16final)  # the 16-core host's CPUs after round 3's changes: CG / power iteration vs numpy with
               # as many threads, dispatch latency, 512^3 FFT on 16 ranks, wire formats on 4/16 ranks
    export DMATH_DEVICE=cpu
    timeout 200 python3 benchmarks/iterative.py --n 1024 16384 --ranks 1 2 16 --repeat 3 --no-doc 2>&1 | tee "$OUT/cpu16_iterative.log" | tail -10
    timeout 100 python3 benchmarks/dispatch.py --ranks 2 --no-doc 2>&1 | tee "$OUT/cpu16_dispatch.log" | tail -20
    timeout 120 python3 benchmarks/fft.py --n 512 --ranks 16 --repeat 1 2>&1 | tee "$OUT/cpu16_fft512.log" | tail -6
    for p in 4 16; do
      timeout 50 python3 benchmarks/redistribute.py --ranks $p --n 4096 --dtype float32 --repeat 5 \
          --wire bf16,int8 --no-doc 2>&1 | tee "$OUT/cpu${p}_redistribute_wire.log" | tail -9
    done
    ;;
  cpu16)
    export DMATH_DEVICE=cpu
    timeout 330 python3 benchmarks/iterative.py --n 1024 16384 --ranks 1 2 4 16 --no-doc 2>&1 | tee "$OUT/cpu16_iterative.log" | tail -10
    timeout 200 python3 benchmarks/dispatch.py --ranks 1 2 --no-doc 2>&1 | tee "$OUT/cpu16_dispatch.log" | tail -26
    ;;
  cpu16b)  # the 16-core host's CPUs, round 3: data-parallel LeNet on 4/16 ranks vs one torch
           # process with as many threads; 3-D FFT on 1/4/16 ranks; eigh/svd vs scipy and
           # ScaLAPACK (carry data/gz and .venv/scalapack/debs)
    export DMATH_DEVICE=cpu
    [ -d data/gz/fashion-mnist ] && export DMATH_DATA=data/gz
    timeout 200 python3 benchmarks/train.py --models lenet --ranks 4,16 --mode spmd --no-doc 2>&1 | tee "$OUT/cpu16_train.log" | tail -12
    timeout 120 python3 benchmarks/fft.py --n 256 --ranks 1 4 16 --repeat 2 2>&1 | tee "$OUT/cpu16_fft.log" | tail -12
    python3 benchmarks/solvers.py --fetch-scalapack > /dev/null 2>&1
    timeout 200 python3 benchmarks/solvers.py --spectral --ranks 16 --sizes 2048 --nb 64 --repeats 1 2>&1 | tee "$OUT/cpu16_spectral.log" | tail -10
    ;;
  solvers)
    timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_solvers.py 2>&1 | tee "$OUT/gpu_solvers_tests.log" | tail -5
    timeout 200 python3 benchmarks/solvers.py --gpu 2>&1 | tee "$OUT/gpu_solvers.log" | tail -8
    ;;
  redistribute)
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_exchange.py tests/test_redistribute.py 2>&1 | tail -5
    timeout 120 python3 benchmarks/redistribute.py --ranks 4 --no-doc 2>&1 | tee "$OUT/gpu_redistribute.log" | tail -12
    for p in 4 8; do
      DMATH_DEVICE=cpu timeout 120 python3 benchmarks/redistribute.py --ranks $p --repeat 21 --no-doc 2>&1 | tee "$OUT/cpu${p}_redistribute.log" | tail -12
    done
    ;;
  indexing)
    timeout 400 python3 -m pytest -q -p no:cacheprovider tests/test_indexing.py tests/test_shape.py 2>&1 | tee "$OUT/gpu_indexing_tests.log" | tail -5
    timeout 180 python3 benchmarks/indexing.py --gpu --ranks 4 --no-doc 2>&1 | tee "$OUT/gpu_indexing.log" | tail -14
    ;;
  io)
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_io.py 2>&1 | tee "$OUT/gpu_io_tests.log" | tail -5
    timeout 120 python3 benchmarks/io.py --gpu --ranks 1 --no-doc 2>&1 | tee "$OUT/gpu_io.log" | tail -12
    ;;
  operators)
    timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_operators.py 2>&1 | tee "$OUT/gpu_operators_tests.log" | tail -5
    DMATH_DEVICE=cpu timeout 240 python3 benchmarks/dispatch.py --ranks 1 2 2>&1 | tee "$OUT/cpu_dispatch.log" | tail -18
    timeout 200 python3 benchmarks/dispatch.py --gpu --ranks 1 2 --no-doc 2>&1 | tee "$OUT/gpu_dispatch.log" | tail -18
    cp docs/performance.md "$OUT"/ 2>/dev/null
    ;;
esac
