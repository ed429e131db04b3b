"""Named numerical tolerances and limits, in one place.

Every threshold a learner compares against lives here, with the reason it exists.
"""

# CBR family: skip a pair whose confidence term zᵀΣz is this small. z ≈ 0 means the new
# event duplicates a buffered one, and α's closed form would be 0/0 (specs README).
CBR_MIN_VARIANCE = 1e-12

# Full-covariance CBR with d at least this keeps Σb for every buffered row b, updated
# with each rank-one step, so that a pair costs O(d) instead of O(d²). Below it, pairs
# that update are frequent enough (a fifth of them on the service's d = 54 feed) that
# keeping 2·capacity products current costs more than it saves (2x slower at d = 54;
# 2-4x faster at d = 300, measured).
CBR_PRODUCTS_MIN_DIM = 128

# Those products are recomputed from Σ every this many events of the stream, so that the
# rounding the updates accumulate stays bounded however long a row stays buffered.
CBR_PRODUCT_REFRESH = 1000

# OAM_seq: skip a pair whose difference has a squared norm this small (duplicate point);
# τ = ℓ/‖δ‖² would divide by zero (spec foam-noam §2.8.3, pitfall 14).
OAM_MIN_SQNORM = 1e-12

# NOAM: keep Nyström eigenvalues above this fraction of the largest one; duplicate
# landmarks make W singular and D^{-1/2} would explode (spec foam-noam §2.6).
NYSTROM_EIG_FLOOR = 1e-6

# SOLAM sparse path: fold the scalar factor of w = σ·u back into u when σ falls below
# this, so that u does not grow without bound (spec solam-mba §2.11).
SOLAM_MIN_SCALE = 1e-4

# Rows with a smaller L2 norm are left as they are by per-row normalisation
# (the authors' code leaves zero vectors unchanged).
MIN_ROW_NORM = 1e-300

# Input dimension limits. Learners with a d×d matrix cap d so that one model's state
# stays within a few hundred MB; sparse-capable learners take hashed spaces up to 2^22.
MAX_FEATURES_QUADRATIC = 4096
MAX_FEATURES_DENSE = 1 << 16
MAX_FEATURES_SPARSE = 1 << 22

# Above this many features a sparse-capable learner stores its buffers sparse by default.
SPARSE_STORAGE_THRESHOLD = 4096

# Parameter ranges. Positive scale parameters (penalties C, steps η and ζ, kernel widths
# σ) are accepted in [SCALE_PARAM_MIN, SCALE_PARAM_MAX]: the papers tune them over
# 2^[-10:10] (about 1e-3 ... 1e3) and the bench down to 2^-16 (1.5e-5), all well inside,
# while values far outside overflow the arithmetic on their own or with inputs up to 1e12
# (measured: NOAM σ ≤ 1e-156 makes 1/(2σ²) infinite, FOAM/FCBR σ ≤ 1e-296 infinite
# frequencies; CBR-diag 'prec' C ≥ 1e16, SOLAM sparse ζ ≥ 1e152, FOAM η and OAM_gra C near
# 1e300 overflow the state or its scores). Each learner's docstring gives its ranges.
SCALE_PARAM_MIN = 1e-6
SCALE_PARAM_MAX = 1e6

# SOLAM's radius R: the paper cross-validates R over 10^[-1:5], so the upper bound is
# higher; from R ≈ 1e144 on, raw rows (normalize=False) of scale 1e12 overflow the state.
SOLAM_MAX_RADIUS = 1e8

# OPAUC's constant step η (papers: 2^[-12:10]) and ridge λ. No range keeps a constant step
# stable on unscaled data (see OPAUC's Notes): these exclude the values that overflow
# within a few events on unit rows (η = 1e30; λ with η·λ far above 2).
OPAUC_MIN_STEP = 1e-8
OPAUC_MAX_STEP = 1e4
OPAUC_MAX_RIDGE = 100.0
