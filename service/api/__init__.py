"""HTTP API: one router per resource, included in one place."""

from fastapi import APIRouter

from . import health, learn, models, score

router = APIRouter()
router.include_router(models.router)
router.include_router(learn.router)
router.include_router(score.router)
router.include_router(health.router)

__all__ = ["router"]
