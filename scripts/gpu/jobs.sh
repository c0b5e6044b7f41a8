# The benchmark jobs on the GPU, by name, as the scripts here run them
# (sourced; the caller sets `steps` and runs from scripts/gpu):
#   command_of JOB  ->  the job's python command line
command_of() {
    case $1 in
        cnn) echo "access/cnn.py --steps $steps" ;;
        cnn-marked) echo "access/cnn.py --steps $steps --mark" ;;
        lm) echo "access/lm.py --steps $steps --strict" ;;
        lm-marked) echo "access/lm.py --steps $steps --strict --mark" ;;
        dense) echo "bench/dense.py --steps $steps" ;;
        inference) echo "bench/inference.py --steps $steps" ;;
        # A sparse step takes a few milliseconds: fifty times the steps, so
        # that its median is taken over as long a run as the others'.
        sparse) echo "bench/sparse.py --steps $((steps * 50))" ;;
    esac
}
