"""HTML pages (placeholder, being filled in)."""
from fastapi import APIRouter

router = APIRouter()
